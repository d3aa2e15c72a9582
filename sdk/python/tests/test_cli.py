"""``python -m warden``, as a person trying a policy runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import Approver, Wardend


def warden_cli(monitor: Wardend, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WARDEN_ENDPOINT": monitor.endpoint, "WARDEN_TOKEN": monitor.token("harness")}
    env.pop("WARDEN_TOKEN_FILE", None)
    return subprocess.run(
        [sys.executable, "-m", "warden", "--user", "alice", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_check_exits_zero_only_when_allowed(wardend: Wardend) -> None:
    allowed = warden_cli(wardend, "check", "read", "/home/alice/project/README.md")
    assert allowed.returncode == 0, allowed.stderr
    assert allowed.stdout.startswith("ALLOW")
    denied = warden_cli(wardend, "check", "read", "/home/alice/project/.env")
    assert denied.returncode == 1
    assert "denied by" in denied.stderr


def test_authorize_prints_pending_and_check_waits_for_the_approver(wardend: Wardend, approver: Approver) -> None:
    pending = warden_cli(wardend, "--json", "authorize", "run", "--", "git", "push", "origin", "main")
    assert pending.returncode == 1
    decision = json.loads(pending.stdout)
    assert decision["outcome"] == "PENDING" and decision["approval_id"]
    env = {**os.environ, "WARDEN_ENDPOINT": wardend.endpoint, "WARDEN_TOKEN": wardend.token("harness")}
    waiting = subprocess.Popen(
        [sys.executable, "-m", "warden", "--user", "alice", "--session", "cli-wait", "check", "run", "--cwd", "/home/alice/project", "--"]
        + ["rm", "-r", "build"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    approval = approver.pending(lambda a: a.request.actor.session == "cli-wait")
    approver.resolve(approval.approval_id, True, "ok")
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert out.startswith("ALLOW")


def test_unreachable_and_bad_usage_exit_codes(wardend: Wardend) -> None:
    env = {**os.environ, "WARDEN_ENDPOINT": "http://127.0.0.1:9", "WARDEN_TOKEN": "x"}
    down = subprocess.run(
        [sys.executable, "-m", "warden", "check", "secret", "deploy-key"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert down.returncode == 3, down.stderr
    assert "cannot reach the monitor" in down.stderr
    bad = warden_cli(wardend, "check", "tool", "github", "create_issue", "{not json")
    assert bad.returncode != 0 and "not JSON" in bad.stderr
