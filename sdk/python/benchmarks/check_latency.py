"""check() latency for an ALLOW: Python sync and async beside the Rust SDK,
against one wardend, in one run.

    cargo build --release -p warden-monitor --bin wardend -p warden-sdk --example check_latency
    target/pysdk/bin/python sdk/python/benchmarks/check_latency.py --calls 2000 --rounds 3

Starts target/release/wardend with the bundled policies on a free loopback
port (audit with fsync, as in production), then, for each round, times
``--calls`` sequential ``check()`` calls of an allowed read with each client
(the Rust SDK by running ``examples/check_latency``). Prints each round's
median and 99th percentile, and the medians over rounds with their ratio to
Rust.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import warden

REPO = Path(__file__).resolve().parents[3]
ACTOR = warden.Actor("alice", "bench", "py-latency")
README = warden.read_file("/home/alice/project/README.md")


def percentiles(micros: list[float]) -> tuple[float, float]:
    micros.sort()
    at = lambda q: micros[round((len(micros) - 1) * q)]  # noqa: E731
    return at(0.5), at(0.99)


def sync_run(endpoint: str, token: str, calls: int) -> tuple[float, float]:
    with warden.Client(endpoint, token) as client:
        client.check(ACTOR, README)  # connect
        micros = []
        for _ in range(calls):
            started = time.perf_counter()
            client.check(ACTOR, README)
            micros.append((time.perf_counter() - started) * 1e6)
    return percentiles(micros)


def async_run(endpoint: str, token: str, calls: int) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        async with warden.AsyncClient(endpoint, token) as client:
            await client.check(ACTOR, README)
            micros = []
            for _ in range(calls):
                started = time.perf_counter()
                await client.check(ACTOR, README)
                micros.append((time.perf_counter() - started) * 1e6)
        return percentiles(micros)

    return asyncio.run(main())


def rust_run(binary: Path, endpoint: str, token: str, calls: int) -> tuple[float, float]:
    env = {**os.environ, "WARDEN_ENDPOINT": endpoint, "WARDEN_TOKEN": token}
    out = subprocess.run([str(binary), str(calls)], env=env, capture_output=True, text=True, check=True).stdout
    fields = dict(part.split("=") for part in out.split())
    return float(fields["p50_us"]), float(fields["p99_us"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wardend", type=Path, default=REPO / "target/release/wardend")
    parser.add_argument("--rust", type=Path, default=REPO / "target/release/examples/check_latency")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        monitor = subprocess.Popen(
            [str(args.wardend), "--listen", "127.0.0.1:0", "--policies", str(REPO / "policies"), "--data", data],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "WARDEN_LOG": "warn"},
        )
        try:
            assert monitor.stdout is not None
            for line in monitor.stdout:
                if line.startswith("wardend listening on "):
                    endpoint = f"http://{line.split()[3]}"
                    break
            else:
                print("wardend did not start", file=sys.stderr)
                return 1
            token = (Path(data) / "harness.token").read_text().strip()
            runs: dict[str, list[tuple[float, float]]] = {"rust": [], "python sync": [], "python async": []}
            for round_ in range(1, args.rounds + 1):
                runs["rust"].append(rust_run(args.rust, endpoint, token, args.calls))
                runs["python sync"].append(sync_run(endpoint, token, args.calls))
                runs["python async"].append(async_run(endpoint, token, args.calls))
                for name, results in runs.items():
                    p50, p99 = results[-1]
                    print(f"round {round_} {name:<13} p50 {p50:7.0f} µs  p99 {p99:7.0f} µs")
            rust = statistics.median(p50 for p50, _ in runs["rust"])
            print(f"\nmedian of {args.rounds} rounds of {args.calls} sequential check() calls (ALLOW):")
            for name, results in runs.items():
                p50 = statistics.median(p for p, _ in results)
                print(f"  {name:<13} p50 {p50:7.0f} µs  ({p50 / rust:.2f}× Rust)")
        finally:
            monitor.terminate()
            monitor.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
