#!/usr/bin/env bash
# bench/long-run.sh - wardend for a long run with audit retention: DECISIONS decisions at
# concurrency 32 (the side-by-side load generator's four-request mix, ../shared/bench/peer),
# in rounds of 10 s; after each round it prints the decision rate, wardend's resident memory,
# the store's size on disk (audit log and sled) and the live log's first record.
#
#   bench/long-run.sh                   # 10 million decisions, retention keeping ~1 million
#   DECISIONS=2000000 KEEP_BYTES=32MiB bench/long-run.sh
#
# Then: the restart time with the store as it is, and `wardenctl audit verify --data` time.
# Knobs: DECISIONS (10000000), KEEP_BYTES (retain_bytes; default 80MiB, about a million
# bench-mix records), CONC (32), ROUND (10 s). Needs the peer client built by side-by-side.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DECISIONS=${DECISIONS:-10000000}; KEEP_BYTES=${KEEP_BYTES:-80MiB}; CONC=${CONC:-32}; ROUND=${ROUND:-10}
BENCH=${BENCH:-$ROOT/target/peer-bench/client-target/release/peer-bench}
[ -x "$BENCH" ] || { echo "build the load generator first: ../shared/bench/peer/side-by-side.sh ." >&2; exit 1; }
(cd "$ROOT" && cargo build --release -q -p warden-monitor -p warden-approver-cli)
TMP=$(mktemp -d); PID=""
trap '[ -n "$PID" ] && kill "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT
cat > "$TMP/wardend.toml" <<TOML
[audit]
retain_bytes = "$KEEP_BYTES"
TOML
start() {
  local t0; t0=$(date +%s.%N)
  "$ROOT/target/release/wardend" --listen 127.0.0.1:50161 --policies "$ROOT/policies" --data "$TMP/data" \
    --config "$TMP/wardend.toml" >>"$TMP/wardend.log" 2>&1 &
  PID=$!
  until [ -s "$TMP/data/harness.token" ] && (exec 3<>/dev/tcp/127.0.0.1/50161) 2>/dev/null; do sleep 0.02; done
  STARTED=$(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 3))" "$(date +%s.%N)" "$t0")
}
start
export WARDEN_TOKEN; WARDEN_TOKEN=$(tr -d '\n' <"$TMP/data/harness.token")
done_n=0; t=0
printf '%6s %12s %9s %9s %10s %10s\n' t_s decisions rate_rps rss_MiB store_MiB first_seq
while [ "$done_n" -lt "$DECISIONS" ]; do
  line=$(BENCH_TARGET=warden "$BENCH" http://127.0.0.1:50161 "$CONC" "$ROUND" 0 1 | grep '^SUMMARY')
  n=$(sed -E 's/.* n=([0-9]+).*/\1/' <<<"$line"); rps=$(sed -E 's/.* rps=([0-9]+).*/\1/' <<<"$line")
  bad=$(sed -E 's/.* errors=([0-9]+) wrong_decisions=([0-9]+).*/\1+\2/' <<<"$line")
  done_n=$((done_n + n)); t=$((t + ROUND))
  rss=$(awk '/VmRSS/ {printf "%.0f", $2/1024}' /proc/"$PID"/status)
  store=$(du -sm "$TMP/data/store" | cut -f1)
  first=$(ls "$TMP/data/store/audit" | grep '\.seg$' | head -1 | sed 's/^0*//; s/\.seg$//')
  printf '%6s %12s %9s %9s %10s %10s %s\n' "$t" "$done_n" "$rps" "$rss" "$store" "$first" "$([ "$bad" = 0+0 ] || echo "errors+wrong=$bad")"
done
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
segs=$(ls "$TMP/data/store/audit" | grep -c '\.seg$'); bytes=$(du -sb "$TMP/data/store/audit" | cut -f1)
echo "live audit log: $segs segments, $bytes bytes"
start
echo "restart with the full store: $STARTED s"
kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
t0=$(date +%s.%N)
"$ROOT/target/release/wardenctl" audit verify --data "$TMP/data"
echo "audit verify --data: $(python3 -c "import sys; print(round(float(sys.argv[1]) - float(sys.argv[2]), 3))" "$(date +%s.%N)" "$t0") s"
echo "store: $(du -sb "$TMP/data/store" | cut -f1) bytes; audit log: $(du -sb "$TMP/data/store/audit" | cut -f1) bytes"
