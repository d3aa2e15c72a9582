"""Regenerates warden/v1 (protobuf and gRPC code, with .pyi stubs) from proto/.

    python sdk/python/generate.py            # rewrite src/warden/v1
    python sdk/python/generate.py --check    # exit 1 if src/warden/v1 is stale

Needs grpcio-tools (the dev extra). tests/test_generated.py runs --check's
comparison, so a change to proto/ without regenerating fails the tests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = HERE.parent.parent / "proto"
PACKAGE = HERE / "src"
GENERATED = Path("warden") / "v1"
# The package marker is ours, not protoc's.
INIT = '"""Generated protobuf and gRPC code for warden/v1 (see generate.py)."""\n'


def generate(into: Path) -> None:
    """Writes warden/v1/*.py and *.pyi for every proto file under `into`."""
    from grpc_tools import protoc

    sources = sorted(str(p.relative_to(PROTO)) for p in (PROTO / "warden" / "v1").glob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO}",
            f"-I{include}",
            f"--python_out={into}",
            f"--pyi_out={into}",
            f"--grpc_python_out={into}",
            *sources,
        ]
    )
    if code != 0:
        raise SystemExit(f"protoc failed with status {code}")
    (into / GENERATED / "__init__.py").write_text(INIT)


def files(root: Path) -> dict[str, bytes]:
    """The generated files under root, by path relative to warden/v1."""
    folder = root / GENERATED
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.suffix in (".py", ".pyi")}


def stale() -> list[str]:
    """Names of the files in src/warden/v1 that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh, committed = files(Path(tmp)), files(PACKAGE)
    return sorted(name for name in fresh.keys() | committed.keys() if fresh.get(name) != committed.get(name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    if args.check:
        differ = stale()
        if differ:
            print(f"src/warden/v1 is stale ({', '.join(differ)}): run python sdk/python/generate.py", file=sys.stderr)
            return 1
        return 0
    generate(PACKAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
