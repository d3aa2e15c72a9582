#!/usr/bin/env python3
"""warden-run's start-up: `warden-run -- true`, N times in a row, beside
bubblewrap alone with the same namespaces and `true` alone; prints p50 and
p90 of each. Needs a running wardend and a harness token:

    WARDEN_ENDPOINT=http://127.0.0.1:50051 WARDEN_TOKEN_FILE=.warden/harness.token \\
        bench/run-startup.py [--runs 40] [--warden-run target/release/warden-run]
"""

import argparse
import os
import statistics
import subprocess
import time

BWRAP = ["bwrap", "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
         "--die-with-parent", "--new-session", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "true"]


def timed(argv: list[str], runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} failed: {done.stderr}")
    times.sort()
    return statistics.median(times) * 1000, times[int(len(times) * 0.9)] * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--warden-run", default="target/release/warden-run")
    args = parser.parse_args()
    if "WARDEN_TOKEN_FILE" not in os.environ and "WARDEN_TOKEN" not in os.environ:
        raise SystemExit("set WARDEN_TOKEN_FILE (a harness token) and WARDEN_ENDPOINT")
    for name, argv in (("warden-run -- true", [args.warden_run, "--", "true"]), ("bwrap -- true", BWRAP), ("true", ["true"])):
        p50, p90 = timed(argv, args.runs)
        print(f"{name:20} p50 {p50:6.1f} ms   p90 {p90:6.1f} ms   ({args.runs} runs)")


if __name__ == "__main__":
    main()
