"""A policy set for the framework guards' tests, with real effects: notes
are files written under a folder of the test's own."""

from __future__ import annotations

from pathlib import Path

from conftest import Wardend, policy_dir
from warden.v1 import authority_pb2 as pb


def guard_policies(into: Path, notes: Path) -> Path:
    return policy_dir(
        into,
        f"""
        @id("notes.write") @reason("notes are written in the notes folder")
        permit (principal, action == Action::"fs.write", resource in Dir::"{notes}");

        @id("notes.no-env") @reason("a note may not be an .env file: it would hold credentials")
        forbid (principal, action == Action::"fs.write", resource) when {{ resource.extension == "env" }};

        @id("notes.delete") @reason("notes may be deleted")
        permit (principal, action == Action::"fs.delete", resource in Dir::"{notes}");

        @id("notes.delete-approved") @reason("deleting needs a person's approval")
        forbid (principal, action == Action::"fs.delete", resource) unless {{ context.approved }};

        @id("tools.any") @reason("tools may be called")
        permit (principal, action == Action::"tool.call", resource);

        @id("tools.deploy") @reason("deploying needs a release manager's approval")
        @approvers("release-managers") @timeout("10m")
        forbid (principal, action == Action::"tool.call", resource)
        when {{ resource.name == "deploy" }} unless {{ context.approved }};
        """,
    )


def assert_used_once_then_refused(wardend: Wardend, approval_id: str) -> None:
    """The audit log's records of an approval: asked, approved, its ALLOW
    given once (to the guard that waited), then one re-ask refused."""
    kinds = [(r.kind, r.outcome) for r in wardend.audit() if r.approval_id == approval_id]
    assert kinds == [
        ("decision", pb.PENDING),
        ("approval.approved", pb.ALLOW),
        ("approval.used", pb.ALLOW),
        ("replay", pb.DENY),
    ], kinds
