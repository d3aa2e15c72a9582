"""Fail-closed Python client for harnesses that ask Warden before an agent acts.

    import warden

    client = warden.Client()  # WARDEN_ENDPOINT, WARDEN_TOKEN or WARDEN_TOKEN_FILE
    actor = warden.Actor("alice", "my-agent", "session-1")
    try:
        client.check(actor, warden.run(["git", "push", "origin", "main"], cwd="/src/app"))
    except warden.WardenError as refusal:
        print(f"not done: {refusal}")  # names the policy and its reason
    else:
        ...  # act

``check`` returns only when the action is allowed (waiting through an
approval); ``authorize`` returns the decision as it is. Guards for agent
frameworks are in :mod:`warden.integrations`.
"""

from ._aio import AsyncClient
from ._client import DEFAULT_TIMEOUT, Client
from ._connection import DEFAULT_ENDPOINT
from ._errors import ApprovalExpired, ConfigurationError, Denied, ProtocolError, Refused, Unavailable, WardenError
from ._model import (
    Actor,
    Decision,
    Outcome,
    Request,
    call_tool,
    delete_file,
    http,
    new_request_id,
    read_file,
    run,
    use_secret,
    write_file,
)

__all__ = [
    "DEFAULT_ENDPOINT",
    "DEFAULT_TIMEOUT",
    "Actor",
    "ApprovalExpired",
    "AsyncClient",
    "Client",
    "ConfigurationError",
    "Decision",
    "Denied",
    "Outcome",
    "ProtocolError",
    "Refused",
    "Request",
    "Unavailable",
    "WardenError",
    "call_tool",
    "delete_file",
    "http",
    "new_request_id",
    "read_file",
    "run",
    "use_secret",
    "write_file",
]
