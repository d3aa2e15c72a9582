"""A policy set for the framework guards' tests, with real effects: notes
are files written under a folder of the test's own."""

from __future__ import annotations

from pathlib import Path

from conftest import policy_dir


def guard_policies(into: Path, notes: Path) -> Path:
    return policy_dir(
        into,
        f"""
        @id("notes.write") @reason("notes are written in the notes folder")
        permit (principal, action == Action::"fs.write", resource in Dir::"{notes}");

        @id("notes.no-env") @reason("a note may not be an .env file: it would hold credentials")
        forbid (principal, action == Action::"fs.write", resource) when {{ resource.extension == "env" }};

        @id("tools.any") @reason("tools may be called")
        permit (principal, action == Action::"tool.call", resource);

        @id("tools.deploy") @reason("deploying needs a release manager's approval")
        @approvers("release-managers") @timeout("10m")
        forbid (principal, action == Action::"tool.call", resource)
        when {{ resource.name == "deploy" }} unless {{ context.approved }};
        """,
    )
