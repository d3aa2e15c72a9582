"""Tool calls to Warden requests (no monitor needed)."""

from __future__ import annotations

import pytest

import warden
from warden.integrations import ToolMapping, deletes, fetches, reads, runs, uses_secret, writes
from warden.integrations._gate import request_id


def test_mapped_tools_are_the_actions_they_are() -> None:
    mapping = ToolMapping(
        "my-agent",
        {
            "read": reads("path", cwd_field="root"),
            "save": writes("file", cwd="/srv/app"),
            "rm": deletes(),
            "sh": runs("command"),
            "exec": runs("argv"),
            "get": fetches("url"),
            "call": fetches("url", method_field="method"),
            "key": uses_secret(),
        },
    )
    read = mapping.request("read", {"path": "a.txt", "root": "/home/alice"})
    assert (read.action, read.resource.path, read.resource.cwd) == ("fs.read", "a.txt", "/home/alice")
    save = mapping.request("save", {"file": "out.txt"})
    assert (save.action, save.resource.cwd) == ("fs.write", "/srv/app")
    assert mapping.request("rm", {"path": "/tmp/x"}).action == "fs.delete"
    assert list(mapping.request("sh", {"command": "ls | wc -l"}).resource.argv) == ["bash", "-c", "ls | wc -l"]
    assert list(mapping.request("exec", {"argv": ["git", "status"]}).resource.argv) == ["git", "status"]
    assert mapping.request("get", {"url": "https://x.dev"}).resource.method == "GET"
    assert mapping.request("call", {"url": "https://x.dev", "method": "POST"}).resource.method == "POST"
    assert mapping.request("key", {"name": "deploy-key"}).resource.name == "deploy-key"
    # Any other tool is a tool.call with its arguments.
    other = mapping.request("send_mail", {"to": "x@y.z"})
    assert (other.action, other.resource.server, other.resource.name) == ("tool.call", "my-agent", "send_mail")
    assert '"to": "x@y.z"' in other.resource.arguments_json


def test_a_mapping_never_makes_up_what_the_call_does_not_say() -> None:
    # The tool's own default method could differ from any we would pick.
    with pytest.raises(ValueError, match="no `method`"):
        fetches("url", method_field="method")({"url": "https://evil.example/upload"})
    with pytest.raises(ValueError, match="no `path`"):
        reads("path")({"file": "/etc/shadow"})
    with pytest.raises(TypeError):
        reads("path")({"path": ["/etc/shadow"]})


def test_request_ids_differ_by_user_and_session() -> None:
    alice = warden.Actor("alice", "a", "s1")
    assert request_id("x", alice, "call-1") == request_id("x", alice, "call-1")
    assert request_id("x", alice, "call-1") != request_id("x", warden.Actor("alice", "a", "s2"), "call-1")
    assert request_id("x", alice, "call-1") != request_id("x", warden.Actor("bob", "a", "s1"), "call-1")
    assert len(request_id("x", alice, "c" * 10_000)) < 64
