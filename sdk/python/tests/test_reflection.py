"""Server reflection as the official Python client speaks it (grpcio-reflection,
which asks ``grpc.reflection.v1alpha``): list the services, resolve
``warden.v1.Authority`` and call ``Authorize`` from the descriptors the
monitor serves alone, with none of this package's generated code."""

from __future__ import annotations

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from conftest import Wardend


def test_the_v1alpha_client_lists_resolves_and_calls_authorize(wardend: Wardend) -> None:
    with grpc.insecure_channel(wardend.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {"warden.v1.Authority", "warden.v1.Approvals", "warden.v1.Admin", "grpc.health.v1.Health"} <= services

        # A pool of its own: what the monitor describes, not what this
        # process already imported.
        pool = DescriptorPool(database)
        authority = pool.FindServiceByName("warden.v1.Authority")
        method = authority.FindMethodByName("Authorize")
        request_class = GetMessageClass(method.input_type)
        decision_class = GetMessageClass(method.output_type)
        request = request_class(
            request_id="reflection-1",
            actor={"user": "alice", "agent": "claude-code", "session": "reflection"},
            action="fs.read",
            file={"path": "/home/alice/project/.env"},
        )
        authorize = channel.unary_unary(
            f"/{authority.full_name}/{method.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=decision_class.FromString,
        )
        decision = authorize(request, metadata=(("authorization", f"Bearer {wardend.token('harness')}"),), timeout=30)

        outcome = method.output_type.fields_by_name["outcome"].enum_type.values_by_number[decision.outcome].name
        assert outcome == "DENY"
        assert decision.request_id == "reflection-1"
        assert "files.no-credentials" in list(decision.policy_ids), decision
        assert decision.audit_seq > 0

        # Without the token the same call is refused: reflection describes,
        # it does not admit.
        try:
            authorize(request, timeout=30)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAUTHENTICATED
        else:
            raise AssertionError("Authorize without a token was answered")
