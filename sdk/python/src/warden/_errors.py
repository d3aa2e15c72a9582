"""What can go wrong. Only a returned decision from ``check`` means allowed."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

if TYPE_CHECKING:
    from ._model import Decision


class WardenError(Exception):
    """Every error of this package: the agent must not act."""


class ConfigurationError(WardenError, ValueError):
    """The client is not configured: endpoint, token or TLS files."""


class _DecisionError(WardenError):
    """A DENY: the decision, with the policies that decided and why."""

    def __init__(self, decision: Decision, head: str) -> None:
        self.decision = decision
        super().__init__(_denial_text(head, decision))

    @property
    def policy_ids(self) -> tuple[str, ...]:
        return self.decision.policy_ids

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.decision.reasons

    @property
    def approval_id(self) -> str:
        return self.decision.approval_id

    @property
    def resolved_by(self) -> str:
        return self.decision.resolved_by

    @property
    def note(self) -> str:
        return self.decision.note


class Denied(_DecisionError):
    """The action is denied: by a policy, an approver, or a lockdown.

    ``policy_ids`` and ``reasons`` say which policies decided and why;
    ``resolved_by`` and ``note`` name the approver who denied it and what they
    wrote, when a person did.
    """

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision, "denied")


class ApprovalExpired(_DecisionError):
    """The action waited for a person and nobody approved it before the
    approval's deadline: silence denies."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision, f"not approved in time (approval {decision.approval_id})")


class Unavailable(WardenError):
    """The monitor could not be reached, or did not answer in time."""

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        self.code = code
        super().__init__(message)


class Refused(WardenError):
    """The monitor refused the call: bad input (``INVALID_ARGUMENT``, naming
    the field), a wrong token (``UNAUTHENTICATED``), a token without the
    right (``PERMISSION_DENIED``), a rate limit (``RESOURCE_EXHAUSTED``)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        self.details = details
        super().__init__(f"the monitor refused the call ({code.name}): {details}")


class ProtocolError(WardenError):
    """The monitor's answer does not make sense."""


def _denial_text(head: str, decision: Decision) -> str:
    text = head
    if decision.policy_ids:
        text += f" by {', '.join(decision.policy_ids)}"
    if decision.reasons:
        text += f": {'; '.join(decision.reasons)}"
    if decision.note:
        text += f" (note from {decision.resolved_by or 'the approver'}: {decision.note})"
    return text
