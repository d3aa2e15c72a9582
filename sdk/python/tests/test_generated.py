"""warden/v1 is what grpcio-tools makes of proto/ today."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]


def test_generated_code_matches_the_proto_files() -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the dev extra) regenerates the code")
    spec = importlib.util.spec_from_file_location("generate", HERE / "generate.py")
    assert spec and spec.loader
    generate = importlib.util.module_from_spec(spec)
    sys.modules["generate"] = generate
    spec.loader.exec_module(generate)
    assert generate.stale() == [], "src/warden/v1 is stale: run python sdk/python/generate.py"


def test_the_package_ships_its_types() -> None:
    import warden

    package = Path(warden.__file__).parent
    assert (package / "py.typed").exists()
    assert sorted(p.name for p in (package / "v1").glob("*.pyi")) == [
        "admin_pb2.pyi",
        "approvals_pb2.pyi",
        "authority_pb2.pyi",
    ]


def test_the_package_type_checks_strictly() -> None:
    pytest.importorskip("mypy", reason="mypy (the dev extra) checks the types")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(HERE / ".mypy_cache")],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
