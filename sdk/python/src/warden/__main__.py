"""``python -m warden``: ask the monitor from the command line.

    python -m warden check run -- git push origin main
    python -m warden authorize read /etc/shadow
    python -m warden check tool github create_issue '{"title": "x"}'

``check`` waits through an approval and exits 0 only when allowed (1 denied
or not approved in time, 3 the monitor unreachable, 2 bad usage or a refused
call); ``authorize`` prints the decision as it is (PENDING included) and exits
0 for ALLOW, 1 otherwise. The connection comes from ``--endpoint`` /
``--token-file`` or the environment, as for :class:`warden.Client`.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Sequence

from . import Actor, Client, Decision, Request, WardenError, _model
from ._errors import ApprovalExpired, Denied, Unavailable


def _request(args: argparse.Namespace) -> Request:
    kind = args.kind
    if kind in ("read", "write", "delete"):
        builder = {"read": _model.read_file, "write": _model.write_file, "delete": _model.delete_file}[kind]
        return builder(args.path, cwd=args.cwd)
    if kind == "run":
        return _model.run(args.argv, cwd=args.cwd or os.getcwd())
    if kind == "http":
        return _model.http(args.method, args.url)
    if kind == "secret":
        return _model.use_secret(args.name)
    try:
        arguments = json.loads(args.arguments) if args.arguments else None
    except json.JSONDecodeError as e:
        raise SystemExit(f"python -m warden: the tool's arguments are not JSON: {e}") from None
    return _model.call_tool(args.server, args.tool, arguments)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m warden", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--endpoint", help="default: WARDEN_ENDPOINT or http://127.0.0.1:50051; several replicas separated by commas"
    )
    parser.add_argument("--token-file", help="default: WARDEN_TOKEN or WARDEN_TOKEN_FILE")
    parser.add_argument("--user", default=os.environ.get("WARDEN_USER") or getpass.getuser())
    parser.add_argument("--agent", default=os.environ.get("WARDEN_AGENT", "python-cli"))
    parser.add_argument("--session", default=os.environ.get("WARDEN_SESSION", "python-cli"))
    parser.add_argument("--justification", default="", help="why; shown to approvers")
    parser.add_argument("--json", action="store_true", help="print the decision as JSON")
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb, text in (("check", "wait through an approval; exit 0 only when allowed"), ("authorize", "one answer")):
        kinds = verbs.add_parser(verb, help=text).add_subparsers(dest="kind", required=True)
        for kind in ("read", "write", "delete"):
            sub = kinds.add_parser(kind, help=f"fs.{kind} of a file")
            sub.add_argument("path")
            sub.add_argument("--cwd")
        sub = kinds.add_parser("run", help="exec of a command line (after --)")
        sub.add_argument("--cwd", help="default: the current directory")
        sub.add_argument("argv", nargs=argparse.REMAINDER)
        sub = kinds.add_parser("http", help="http.request")
        sub.add_argument("method")
        sub.add_argument("url")
        sub = kinds.add_parser("secret", help="secret.use")
        sub.add_argument("name")
        sub = kinds.add_parser("tool", help="tool.call with JSON arguments")
        sub.add_argument("server")
        sub.add_argument("tool")
        sub.add_argument("arguments", nargs="?")
    return parser


def _show(decision: Decision, as_json: bool) -> None:
    if as_json:
        fields = {k: v for k, v in decision.__dict__.items()}
        fields["outcome"] = decision.outcome.value
        fields["expires_at"] = decision.expires_at.isoformat() if decision.expires_at else None
        print(json.dumps(fields, default=list))
        return
    print(f"{decision.outcome.value} (audit #{decision.audit_seq})")
    for policy in decision.policy_ids:
        print(f"  policy: {policy}")
    for reason in decision.reasons:
        print(f"  reason: {reason}")
    if decision.approval_id:
        print(f"  approval: {decision.approval_id}")
    if decision.resolved_by:
        print(f"  resolved by: {decision.resolved_by}" + (f" ({decision.note})" if decision.note else ""))


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.kind == "run":
        args.argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    try:
        request = _request(args)
        actor = Actor(args.user, args.agent, args.session)
        with Client(args.endpoint, token_file=args.token_file) as client:
            if args.verb == "authorize":
                decision = client.authorize(actor, request, justification=args.justification)
                _show(decision, args.json)
                return 0 if decision.allowed else 1
            _show(client.check(actor, request, justification=args.justification), args.json)
            return 0
    except (Denied, ApprovalExpired) as refusal:
        if args.json:
            _show(refusal.decision, True)
        print(f"python -m warden: {refusal}", file=sys.stderr)
        return 1
    except Unavailable as e:
        print(f"python -m warden: {e}", file=sys.stderr)
        return 3
    except (WardenError, TypeError, ValueError) as e:
        print(f"python -m warden: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
