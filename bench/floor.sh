#!/usr/bin/env bash
# bench/floor.sh - where Warden's time goes beside the Cerbos PDP: the same load generator
# and measure.py as ../shared/bench/peer/side-by-side.sh, against Cerbos, wardend, and the
# stand-in servers of monitor/examples/grpc_floor.rs (`bare`: tonic answering at once;
# `decide`: + the pure decision; `decide-fsync`: + a group-committed fdatasync per answer).
# Run side-by-side.sh once first (it installs Cerbos and builds the load generator).
#
# Prints one RESULT line per server, concurrency and round, then the medians, each over
# Cerbos's. Knobs: DUR=5 ROUNDS=3 CONCS="1 32" SERVERS="cerbos wardend bare decide decide-fsync"
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEER="$ROOT/../shared/bench/peer"
WORK="$ROOT/target/peer-bench"
DUR="${DUR:-5}"; ROUNDS="${ROUNDS:-3}"; CONCS="${CONCS:-1 32}"
SERVERS="${SERVERS:-cerbos wardend bare decide decide-fsync}"
BENCH="$WORK/client-target/release/peer-bench"
CERBOS="$WORK/node_modules/@cerbos/cerbos-linux-x64/cerbos-linux-x64"
for need in "$BENCH" "$CERBOS" "$WORK/cerbos.yaml"; do
  [ -e "$need" ] || { echo "missing $need: run $PEER/side-by-side.sh . first" >&2; exit 1; }
done
(cd "$ROOT" && cargo build --release -q -p warden-monitor --bin wardend --example grpc_floor)
PID=""; TMP=$(mktemp -d)
cleanup() { if [ -n "$PID" ] && kill -0 "$PID" 2>/dev/null; then kill "$PID"; wait "$PID" 2>/dev/null || true; fi; rm -rf "$TMP"; }
trap cleanup EXIT
port_open() { (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
wait_port() { for _ in $(seq 400); do port_open "$1" && return; sleep 0.05; done; echo "no server on $1" >&2; exit 1; }

start() {
  case "$1" in
    cerbos)
      CERBOS_NO_TELEMETRY=1 "$CERBOS" server --config="$WORK/cerbos.yaml" --log-level=warn >"$TMP/server.log" 2>&1 &
      PID=$!; ADDR=http://127.0.0.1:3593; TARGET=cerbos; wait_port 3593 ;;
    wardend)
      rm -rf "$TMP/data"
      "$ROOT/target/release/wardend" --listen 127.0.0.1:50151 --policies "$ROOT/policies" --data "$TMP/data" \
        >"$TMP/server.log" 2>&1 &
      PID=$!; ADDR=http://127.0.0.1:50151; TARGET=warden
      for _ in $(seq 200); do [ -s "$TMP/data/harness.token" ] && port_open 50151 && break; sleep 0.05; done
      export WARDEN_TOKEN; WARDEN_TOKEN=$(tr -d '\n' <"$TMP/data/harness.token") ;;
    *)
      "$ROOT/target/release/examples/grpc_floor" "$1" 127.0.0.1:50152 >"$TMP/server.log" 2>&1 &
      PID=$!; ADDR=http://127.0.0.1:50152; TARGET=warden; export WARDEN_TOKEN=unused; wait_port 50152 ;;
  esac
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }

: >"$TMP/results"
for round in $(seq "$ROUNDS"); do
  for server in $SERVERS; do
    start "$server"
    BENCH_TARGET=$TARGET "$BENCH" "$ADDR" 8 1 0 1 >/dev/null # warm-up
    for c in $CONCS; do
      line=$(BENCH_TARGET=$TARGET python3 "$PEER/measure.py" "${server}_c$c" "$PID" -- "$BENCH" "$ADDR" "$c" "$DUR" 0 1 |
        grep '^RESULT')
      echo "$line round=$round" | tee -a "$TMP/results"
    done
    stop
  done
done

python3 - "$TMP/results" "$CONCS" "$SERVERS" <<'EOF'
import statistics, sys
rows = [dict(kv.split("=", 1) for kv in l.split()[2:]) | {"label": l.split()[1]} for l in open(sys.argv[1])]
concs, servers = sys.argv[2].split(), sys.argv[3].split()
def med(label, key):
    v = [float(r[key]) for r in rows if r["label"] == label]
    return statistics.median(v) if v else float("nan")
bad = sum(int(r["errors"]) + int(r["wrong_decisions"]) for r in rows)
for c in concs:
    base = f"cerbos_c{c}"
    for s in servers:
        l = f"{s}_c{c}"
        print(f"MEDIAN {l:<18} rps={med(l,'rps'):>6.0f} ({med(l,'rps')/med(base,'rps'):.2f}x)"
              f" p50_us={med(l,'p50_us'):>5.0f} ({med(l,'p50_us')/med(base,'p50_us'):.2f}x)"
              f" p99_us={med(l,'p99_us'):>6.0f} ({med(l,'p99_us')/med(base,'p99_us'):.2f}x)"
              f" server_us_per_req={med(l,'server_us_per_req'):>6.1f} loadgen_cpu_pct={med(l,'loadgen_cpu_pct'):.0f}")
print(f"errors_or_wrong={bad}")
EOF
