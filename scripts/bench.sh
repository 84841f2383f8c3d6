#!/usr/bin/env bash
# Fenceline's benchmarks, each beside its reference in the same invocation:
#   scripts/bench.sh                 # ledger, pipeline (both backends, and graphile-worker beside it
#                                    # on PostgreSQL), console (both backends), renewals (both),
#                                    # submit (both)
#   scripts/bench.sh ledger|pipeline|console|renewals|drills|submit|throttle
# PostgreSQL runs with durable commits (fsync on, synchronous_commit on) in a throwaway
# cluster; SQLite runs in WAL with synchronous=FULL in a temporary file.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

which=${1:-all}
cargo build --release --locked -p fenceline
bin=target/release/fenceline
start_postgres -c shared_buffers=256MB
sqlite_dir=$(mktemp -d /tmp/fenceline-bench.XXXXXX)
_fenceline_cleanups+=("rm -rf '$sqlite_dir'")
fresh_pg() {
  local name="bench_$RANDOM$RANDOM"
  "$PG_BIN/psql" -q "$PG_URL" -c "CREATE DATABASE $name" >/dev/null
  echo "${PG_URL%/*}/$name"
}
fresh_sqlite() { echo "sqlite://$sqlite_dir/bench-$RANDOM$RANDOM.sqlite?mode=rwc"; }

echo
echo "== $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%dT%H:%MZ)"
if [ "$which" = all ] || [ "$which" = ledger ]; then
  "$bin" bench ledger --database-url "$(fresh_pg)"
  "$bin" bench ledger --database-url "$(fresh_sqlite)" --sqlite-synchronous full
fi
if [ "$which" = all ] || [ "$which" = pipeline ]; then
  # Fenceline end to end, then graphile-worker (pinned, from npm) on the same PostgreSQL with
  # the same number of no-op jobs at concurrency 16, both ways: pre-inserted then drained, and
  # added while its workers run.
  jobs=${PIPELINE_JOBS:-10000}
  # The group-commit rates (jobs/s) from a `bench pipeline` table on standard input: fed while
  # the workers run, and drained (every job submitted first, timed from the workers' start).
  group_rate() { awk -F'|' '/^\| fenceline, group commit: / { gsub(/[^0-9]/, "", $5); print $5 }'; }
  drained_rate() { awk -F'|' '/^\| fenceline, group commit, drained/ { gsub(/[^0-9]/, "", $5); print $5 }'; }
  # The same rows a job writes, by set-based SQL alone: what the record costs the database.
  record_rate() { awk -F'|' '/^\| reference: the same rows/ { gsub(/[^0-9]/, "", $5); print $5 }'; }
  out=$("$bin" bench pipeline --database-url "$(fresh_pg)" --jobs "$jobs")
  echo "$out"
  fenceline=$(echo "$out" | group_rate)
  drained=$(echo "$out" | drained_rate)
  record=$(echo "$out" | record_rate)
  peer=scripts/peers/graphile-worker
  (cd "$peer" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  # Each graphile-worker mode against Fenceline's pass fed the same way, and against
  # Fenceline's end-to-end (live) rate.
  ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
  same=() ends=()
  for mode in preinserted live; do
    line=$(node "$peer/run.js" "$(fresh_pg)" "$jobs" "$mode")
    echo "$line"
    peer_rate=$(echo "$line" | grep -Eo '[0-9]+ jobs/s' | tr -dc '0-9')
    if [ "$mode" = preinserted ]; then mine=$drained; else mine=$fenceline; fi
    same+=("$(ratio "$mine" "$peer_rate")")
    ends+=("$(ratio "$fenceline" "$peer_rate")")
    echo "   Fenceline / graphile-worker ($mode): ${same[-1]}x fed the same way, ${ends[-1]}x end to end"
  done
  out=$("$bin" bench pipeline --database-url "$(fresh_sqlite)" --sqlite-synchronous full --jobs "$jobs")
  echo "$out"
  lite=$(echo "$out" | group_rate)
  lite_record=$(echo "$out" | record_rate)
  # The bar (docs/benchmarks.md, quality.md): each figure against its target, met or not.
  verdict() { python3 -c "print('met' if $1 >= $2 else 'not met')"; }
  echo
  share() { python3 -c "print(f'{100 * $1 / $2:.0f} %')"; }
  echo "record: group commit at $(share "$fenceline" "$record") of the same rows by set-based SQL on PostgreSQL ($record jobs/s), $(share "$lite" "$lite_record") on SQLite ($lite_record jobs/s)"
  echo "bar: PostgreSQL $fenceline jobs/s (target >= 4000): $(verdict "$fenceline" 4000)"
  echo "bar: SQLite $lite jobs/s (target >= 5000): $(verdict "$lite" 5000)"
  echo "bar: graphile-worker fed the same way: drained ${same[0]}x, live ${same[1]}x (target >= 2x both): $(verdict "min(${same[0]}, ${same[1]})" 2)"
  echo "bar: graphile-worker against Fenceline end to end: drained ${ends[0]}x, live ${ends[1]}x (target >= 2x both): $(verdict "min(${ends[0]}, ${ends[1]})" 2)"
fi
if [ "$which" = all ] || [ "$which" = console ]; then
  "$bin" bench console --database-url "$(fresh_pg)"
  "$bin" bench console --database-url "$(fresh_sqlite)"
fi
if [ "$which" = all ] || [ "$which" = submit ]; then
  # Jobs through the API, one a request beside batches of 100, 16 clients, alternating rounds.
  "$bin" bench submit --database-url "$(fresh_pg)"
  "$bin" bench submit --database-url "$(fresh_sqlite)" --sqlite-synchronous full
fi
if [ "$which" = all ] || [ "$which" = renewals ]; then
  # One worker process holding RENEWALS_IN_FLIGHT calls (default 120,000, as many as SQS
  # lets one queue have in flight), on each backend.
  in_flight=${RENEWALS_IN_FLIGHT:-120000}
  "$bin" bench renewals --database-url "$(fresh_pg)" --db-max-connections 32 --in-flight "$in_flight"
  "$bin" bench renewals --database-url "$(fresh_sqlite)" --sqlite-synchronous full --in-flight "$in_flight"
fi
if [ "$which" = all ] || [ "$which" = drills ]; then
  # The whole drill catalogue at compressed timings: wall time per queue (bar: 60 s).
  start_moto
  for target in "embedded $(fresh_sqlite)" "embedded $(fresh_pg)" "sqs $(fresh_pg)"; do
    set -- $target
    started=$(date +%s.%N)
    "$bin" drill run all --queue "$1" --database-url "$2" 2>&1 | tail -1
    echo "drills on $1 (${2%%:*}): $(python3 -c "print(f'{$(date +%s.%N) - $started:.1f}')") s wall"
  done
fi
if [ "$which" = all ] || [ "$which" = throttle ]; then
  # Flow control through real serve and worker processes: 600 jobs at once against a model
  # server admitting 20 requests a second (bucket 20 deep, 200 ms an answer, 429 with
  # retry-after beyond), on the embedded default, on PostgreSQL with serve's own worker, and
  # with two worker processes on PostgreSQL sharing the limit through the embedded queue and
  # through an SQS endpoint (moto, maxReceiveCount 5); a server refusing everything; then a
  # quiet tenant's 20 jobs behind another's 3,000 (stub model at 300 ms).
  start_moto
  "$bin" bench throttle
  "$bin" bench throttle --ledger-url "$(fresh_pg)"
  "$bin" bench throttle --ledger-url "$(fresh_pg)" --workers 2
  "$bin" bench throttle --ledger-url "$(fresh_pg)" --workers 2 --queue sqs
  "$bin" bench throttle --forever --jobs 50 --deadline-secs 20
  "$bin" bench fairness
fi
