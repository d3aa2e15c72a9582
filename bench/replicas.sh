#!/usr/bin/env bash
# bench/replicas.sh - decisions per second and latency of wardend on its embedded store, on
# PostgreSQL, and as two replicas on one PostgreSQL database, with the peer load generator of
# ../shared/bench/peer/ (the same closed-loop four-request mix, one HTTP/2 connection per
# generator), one run, on this machine. About 3 minutes after the builds.
#
#   bench/replicas.sh [PEER_DIR]     # PEER_DIR: ../shared/bench/peer (default)
#
# Configurations, alternated round by round so that noise hits all of them:
#   sled     one wardend, embedded store (fsync durability)
#   pg       one wardend, --store on a PostgreSQL 15 cluster of the script's own (loopback,
#            synchronous_commit on, fsync on: the defaults)
#   pg2      two wardend on that database, a generator on each at once; rps is their sum,
#            p50/p99 the worse of the two (at concurrency 1: one client on each, 2 in all)
# At concurrency 1 and 32 (pg2: 16 per replica, 32 in all). Then the bytes the database holds
# per decision (tables and indexes over records).
# Knobs: DUR=5 ROUNDS=3 WORK=target/peer-bench (the load generator's build, shared with
#        side-by-side.sh)
set -euo pipefail
CHECKOUT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PEER=$(cd "${1:-$CHECKOUT/../shared/bench/peer}" && pwd)
DUR="${DUR:-5}"; ROUNDS="${ROUNDS:-3}"
WORK="${WORK:-$CHECKOUT/target/peer-bench}"
log() { echo "[replicas $(date +%T)] $*" >&2; }
PIDS=(); TMP=$(mktemp -d); chmod 755 "$TMP"
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/initdb" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 1; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -d "$TMP/pg" ] && as_pg "$PGBIN/pg_ctl" -D "$TMP/pg" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT

if [ -z "${PROTOC:-}" ] && ! command -v protoc >/dev/null; then
  PROTOC=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/protoc-bin-vendored-linux-x86_64-*/bin/protoc 2>/dev/null | head -1)
  export PROTOC
fi
log "building the load generator and wardend"
# A copy of the load generator, its requests given the fields the checkout's
# proto has added since (prost's defaults: the same requests).
rm -rf "$WORK/client-src" && cp -r "$PEER/client" "$WORK/client-src"
sed -i 's/cwd: String::new() })/cwd: String::new(), ..Default::default() })/g' "$WORK/client-src/src/main.rs"
(cd "$WORK/client-src" && WARDEN_PROTO="$CHECKOUT/proto" CARGO_TARGET_DIR="$WORK/client-target" cargo build --release --locked -q)
(cd "$CHECKOUT" && cargo build --release -q -p warden-monitor)
BENCH="$WORK/client-target/release/peer-bench"
WARDEND="$CHECKOUT/target/release/wardend"
port_open() { (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

log "a PostgreSQL cluster of the script's own"
[ "$(id -u)" = 0 ] && chown postgres "$TMP"
as_pg "$PGBIN/initdb" -D "$TMP/pg" --auth=trust -U postgres -E UTF8 >/dev/null
PGPORT=$(free_port)
as_pg "$PGBIN/pg_ctl" -D "$TMP/pg" -l "$TMP/pg.log" -w -o "-p $PGPORT -k $TMP -c listen_addresses=127.0.0.1" start >/dev/null
URL="postgres://postgres@127.0.0.1:$PGPORT/warden"
fresh_db() {
  as_pg "$PGBIN/dropdb" -h 127.0.0.1 -p "$PGPORT" -U postgres --if-exists warden
  as_pg "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres warden
}

# start NAME PORT [--store URL] -> waits until it listens
start() {
  local name=$1 port=$2; shift 2
  mkdir -p -m 700 "$TMP/$name"
  [ -f "$TMP/credentials.toml" ] && cp "$TMP/credentials.toml" "$TMP/$name/"
  WARDEN_LOG=warn "$WARDEND" --listen "127.0.0.1:$port" --policies "$CHECKOUT/policies" --data "$TMP/$name" "$@" \
    >"$TMP/$name.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 400); do port_open "$port" && [ -s "$TMP/$name/credentials.toml" ] && break; sleep 0.05; done
  port_open "$port" || { log "wardend $name did not start"; cat "$TMP/$name.log"; exit 1; }
  [ -f "$TMP/credentials.toml" ] || { cp "$TMP/$name/credentials.toml" "$TMP/"; cp "$TMP/$name/harness.token" "$TMP/"; }
}
stop_all() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; PIDS=(); rm -rf "$TMP"/sled "$TMP"/pg-a "$TMP"/pg-b; }
run() { # run LABEL ADDR CONC -> a SUMMARY line
  BENCH_TARGET=warden "$BENCH" "$2" "$3" "$DUR" 1 1 | grep '^SUMMARY' | sed "s/^SUMMARY/RESULT $1/"
}

: > "$TMP/results"
for round in $(seq "$ROUNDS"); do
  for config in sled pg pg2; do
    P1=$(free_port); P2=$(free_port)
    case $config in
      sled) start sled "$P1" ;;
      pg) fresh_db; start pg-a "$P1" --store "$URL" ;;
      pg2) fresh_db; start pg-a "$P1" --store "$URL"; start pg-b "$P2" --store "$URL" ;;
    esac
    export WARDEN_TOKEN; WARDEN_TOKEN=$(tr -d '\n' <"$TMP/harness.token")
    BENCH_TARGET=warden "$BENCH" "http://127.0.0.1:$P1" 8 1 0 1 >/dev/null   # warm-up
    for c in 1 32; do
      if [ "$config" = pg2 ]; then
        half=$(( c > 1 ? c / 2 : 1 ))
        run pg2_a "http://127.0.0.1:$P1" "$half" > "$TMP/a" & ra=$!
        run pg2_b "http://127.0.0.1:$P2" "$half" > "$TMP/b" & rb=$!
        wait "$ra" "$rb"
        python3 - "$TMP/a" "$TMP/b" "$c" "$round" <<'EOF' | tee -a "$TMP/results"
import sys
rows = [dict(kv.split("=", 1) for kv in open(p).read().split()[2:]) for p in sys.argv[1:3]]
rps = sum(float(r["rps"]) for r in rows)
worse = lambda k: max(int(r[k]) for r in rows)
errors = sum(int(r["errors"]) + int(r["wrong_decisions"]) for r in rows)
print(f"RESULT pg2_c{sys.argv[3]} rps={rps:.0f} p50_us={worse('p50_us')} p99_us={worse('p99_us')} errors={errors} round={sys.argv[4]}")
EOF
      else
        line=$(run "${config}_c$c" "http://127.0.0.1:$P1" "$c")
        echo "$line round=$round" | tee -a "$TMP/results"
      fi
    done
    if [ "$config" = pg ] && [ "$round" = 1 ]; then
      psql -X -A -t -q "$URL" -c "SELECT (SELECT count(*) FROM warden_audit), (SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname LIKE 'warden_%')" \
        | awk -F'|' '{ printf "BYTES records=%d database_bytes=%d bytes_per_decision=%.0f\n", $1, $2, $2 / $1 }' | tee "$TMP/bytes"
    fi
    stop_all
  done
done

python3 - "$TMP/results" <<'EOF'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) < 2 or parts[0] != "RESULT":
        continue
    rows.append(dict(kv.split("=", 1) for kv in parts[2:] if "=" in kv) | {"label": parts[1]})
def med(label, key):
    v = [float(r[key]) for r in rows if r["label"] == label]
    return statistics.median(v) if v else float("nan")
bad = sum(int(r.get("errors", 0)) + int(r.get("wrong_decisions", 0)) for r in rows)
for label in ["sled_c1", "pg_c1", "pg2_c1", "sled_c32", "pg_c32", "pg2_c32"]:
    print(f"MEDIAN {label} rps={med(label,'rps'):.0f} p50_us={med(label,'p50_us'):.0f} p99_us={med(label,'p99_us'):.0f}")
print(f"RATIO c32_rps pg/sled={med('pg_c32','rps')/med('sled_c32','rps'):.2f} pg2/pg={med('pg2_c32','rps')/med('pg_c32','rps'):.2f} "
      f"c1_p50 pg/sled={med('pg_c1','p50_us')/med('sled_c1','p50_us'):.2f} errors_or_wrong={bad}")
EOF
cat "$TMP/bytes" 2>/dev/null || true
