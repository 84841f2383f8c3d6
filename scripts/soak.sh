#!/usr/bin/env bash
# The chaos soak. N jobs go through the API into several `fenceline worker` processes on a
# throwaway PostgreSQL, with the embedded queue (default) or an SQS endpoint (moto_server,
# `--queue sqs`). Each worker injects duplicate deliveries, failed deletes, visibility-renewal
# timeouts, lease-renewal failures and group commits whose answer is lost (5 % each); the stub
# model loses some responses and fails some calls retryably. Meanwhile workers are paused past
# their visibility timeout (SIGSTOP/SIGCONT) and killed (SIGKILL) and restarted, PostgreSQL is
# restarted once and `serve` once. When every job is terminal or `unknown` (or the time limit
# is reached), `fenceline soak check` reads the ledger and prints the verdict; the script
# exits with its status.
#
#   scripts/soak.sh [--jobs N] [--workers K] [--queue embedded|sqs] [--limit SECONDS]
#                   [--rate FRACTION] [--latency-ms MS] [--in-flight CALLS] [--bin PATH]
#                   [--provider stub|openai-responses] [--max-unknown FRACTION]
#
# With --provider openai-responses the workers call OpenAI's Responses API in background mode,
# served by `fenceline soak responses-server` (the stand-in written from the API reference) in a
# process of its own, which loses 1 % of its polls and 0.5 % of its create answers (after storing
# the response) and outlives the workers killed mid-call: their attempts are adopted by the
# workers that receive the jobs next.
#
# Model calls last --latency-ms (2 s by default: longer than the compressed 2 s visibility
# timeout, so every call renews its visibility and its lease, and those renewals meet faults).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

jobs=2000 workers=3 in_flight=16 queue=embedded limit=900 rate=0.05 latency=2000 bin="" provider=stub
max_unknown=()
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) jobs=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    --queue) queue=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --latency-ms) latency=$2; shift 2 ;;
    --in-flight) in_flight=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --provider) provider=$2; shift 2 ;;
    --max-unknown) max_unknown=(--max-unknown "$2"); shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  cargo build --locked --release -p fenceline
  bin=target/release/fenceline
fi
bin=$(realpath "$bin")

dir=$(mktemp -d /tmp/fenceline-soak.XXXXXX)
_fenceline_cleanups+=("rm -rf '$dir'")
start_postgres
"$PG_BIN/psql" -q "$PG_URL" -c "CREATE DATABASE soak" >/dev/null
export DATABASE_URL="${PG_URL%/*}/soak"
export FENCELINE_QUEUE=$queue FENCELINE_QUEUE_NAME="soak-$RANDOM" FENCELINE_TIMINGS=compressed
export FENCELINE_STUB_LATENCY_MS=$latency FENCELINE_STUB_LOST_RATE=0.01 FENCELINE_STUB_RETRYABLE_RATE=0.02
export FENCELINE_PROVIDER_RETRIEVAL=1 FENCELINE_REAPER_INTERVAL_MS=500 FENCELINE_LOG=warn
case "$provider" in
  stub) ;;
  openai-responses)
    stand_in_port=$(free_port)
    "$bin" soak responses-server --bind "127.0.0.1:$stand_in_port" --latency-ms "$latency" \
      --lose-rate 0.01 --lose-create-rate 0.005 >>"$dir/stand-in.log" 2>&1 &
    _fenceline_cleanups+=("kill $! 2>/dev/null || true")
    export FENCELINE_PROVIDER=openai-responses FENCELINE_PROVIDER_URL="http://127.0.0.1:$stand_in_port/v1"
    export FENCELINE_PROVIDER_MODEL=stand-in FENCELINE_PRICES="stand-in=0.15/0.60"
    wait_http "http://127.0.0.1:$stand_in_port/stand-in/stats" 50 "$dir/stand-in.log"
    ;;
  *) echo "unknown provider: $provider" >&2; exit 2 ;;
esac
if [ "$queue" = sqs ]; then
  start_moto
  "$bin" queue create "$FENCELINE_QUEUE_NAME" --max-receive-count 5 >/dev/null
fi
"$bin" migrate >/dev/null
token=$("$bin" token add soak 2>/dev/null)
psql_q() { "$PG_BIN/psql" -qtA "$DATABASE_URL" -c "$1" 2>/dev/null; }

echo "== soak: $jobs jobs, $workers worker processes, $queue queue, $provider model, faults at $rate each, ${latency} ms calls, limit ${limit}s"
port=$(free_port)
api="http://127.0.0.1:$port"
serve_pid=""
start_serve() {
  "$bin" serve --no-worker --bind "127.0.0.1:$port" >>"$dir/serve.log" 2>&1 &
  serve_pid=$!
}
declare -a worker_pids
start_worker() {
  FENCELINE_SOAK_FAULTS=$rate "$bin" worker --worker-id "soak-w$1" --max-in-flight "$in_flight" \
    >>"$dir/worker-$1.log" 2>&1 &
  worker_pids[$1]=$!
  disown "${worker_pids[$1]}"
}
stop_all() {
  local pid
  for pid in "${worker_pids[@]}" $serve_pid; do
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${worker_pids[@]}" $serve_pid; do
    while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
  done
}
_fenceline_cleanups+=("stop_all")
start_serve
for i in $(seq 1 "$workers"); do start_worker "$i"; done
wait_http "$api/readyz" 150 "$dir/serve.log"

# Submissions: eight clients, each job retried until the API answers (serve restarts mid-run);
# the idempotency key makes a retried submission the same job.
python3 - "$api" "$token" "$jobs" >"$dir/submit.log" 2>&1 <<'PY' &
import json, sys, threading, time, urllib.request
api, token, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def submit(i):
    body = json.dumps({"idempotency_key": f"soak-{i}", "input": {"document": f"report {i}"},
                       "model": {"max_tokens": 256}}).encode()
    while True:
        try:
            req = urllib.request.Request(f"{api}/api/v1/jobs", data=body, method="POST",
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                if r.status in (200, 201):
                    return
        except Exception:
            time.sleep(0.2)
def client(k):
    for i in range(k, n, 8):
        submit(i)
threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print("submitted", n)
PY
submitter=$!

started=$(date +%s)
elapsed() { echo $(( $(date +%s) - started )); }
open_jobs() {
  psql_q "SELECT (SELECT count(*) FROM jobs WHERE tenant = 'soak') - (SELECT count(*) FROM jobs WHERE tenant = 'soak' AND state IN ('succeeded', 'failed_terminal', 'expired', 'unknown'))" || echo "?"
}
finished_jobs() {
  psql_q "SELECT count(*) FROM jobs WHERE tenant = 'soak' AND state IN ('succeeded', 'failed_terminal', 'expired', 'unknown')" || echo "?"
}
pg_restarted=0 serve_restarted=0 round=0
while :; do
  sleep 2
  round=$((round + 1))
  t=$(elapsed)
  victim=$(( (round % workers) + 1 ))
  case $((round % 4)) in
    1) # Paused past its visibility timeout (2 s): its messages come back to the others.
       kill -STOP "${worker_pids[$victim]}" 2>/dev/null && echo "   ${t}s: worker $victim paused" && sleep 3 \
         && kill -CONT "${worker_pids[$victim]}" 2>/dev/null && echo "   $(elapsed)s: worker $victim resumed" ;;
    3) # Killed outright, and started again.
       kill -KILL "${worker_pids[$victim]}" 2>/dev/null && echo "   ${t}s: worker $victim killed" \
         && sleep 1 && start_worker "$victim" && echo "   $(elapsed)s: worker $victim restarted" ;;
  esac
  if [ $pg_restarted = 0 ] && [ "$(finished_jobs)" != "?" ] && [ "$(finished_jobs)" -ge $((jobs / 3)) ]; then
    echo "   $(elapsed)s: restarting PostgreSQL"
    (cd /tmp && ${PG_RUN_AS:-} "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w restart >/dev/null)
    pg_restarted=1
  elif [ $serve_restarted = 0 ] && [ $pg_restarted = 1 ] && [ "$(finished_jobs)" != "?" ] && [ "$(finished_jobs)" -ge $((jobs / 2)) ]; then
    echo "   $(elapsed)s: restarting serve"
    kill "$serve_pid" && wait "$serve_pid" 2>/dev/null || true
    start_serve
    serve_restarted=1
  fi
  total=$(psql_q "SELECT count(*) FROM jobs WHERE tenant = 'soak'" || echo "?")
  open=$(open_jobs)
  echo "   $(elapsed)s: $total of $jobs jobs in the ledger, $open not yet terminal or unknown"
  if ! kill -0 "$submitter" 2>/dev/null && [ "$total" = "$jobs" ] && [ "$open" = 0 ] \
      && [ $pg_restarted = 1 ] && [ $serve_restarted = 1 ]; then
    break
  fi
  if [ "$(elapsed)" -ge "$limit" ]; then
    echo "   the time limit (${limit}s) is reached: checking what the ledger holds"
    break
  fi
done
took=$(elapsed)
stop_all
echo "== faults and recoveries on the timelines"
psql_q "SELECT kind || ': ' || count(*) FROM events e JOIN jobs j ON j.job_id = e.job_id WHERE j.tenant = 'soak' AND kind IN ('delete_failed', 'visibility_renewal_failed', 'lease_renewal_failed', 'lease_lost', 'duplicate_suppressed', 'delivery_deferred', 'recovery_claimed', 'result_rejected', 'decision_recorded', 'delivery_acked_terminal', 'attempt_submitted', 'upstream_cancelled') GROUP BY kind ORDER BY kind" | sed 's/^/   /'
echo "   group commits that got no answer: $(cat "$dir"/worker-*.log | grep -c 'group commit got no answer' || true) ($(cat "$dir"/worker-*.log | grep 'group commit got no answer' | grep -c 'landed=Some(true)' || true) had landed)"
echo "   redeliveries: $(psql_q "SELECT count(*) FROM events e JOIN jobs j ON j.job_id = e.job_id WHERE j.tenant = 'soak' AND e.kind = 'delivery_received' AND e.receive_count > 1")"
echo "== verdict after ${took}s ($jobs jobs, $workers workers, $queue queue)"
status=0
"$bin" soak check --tenant soak --expect "$jobs" "${max_unknown[@]}" | tee "$dir/verdict.txt" || status=$?
if [ "$status" != 0 ]; then
  # The timelines of the jobs the checker named (the first five), for whoever reads the log.
  for job in $(grep -oE 'job_[0-9a-f-]{36}' "$dir/verdict.txt" | sort -u | head -5); do
    echo "== timeline of $job: seq | ms since created | kind | epoch | actor | message | receives | detail"
    psql_q "SELECT concat_ws(' | ', seq, at / 1000 - min(at / 1000) OVER (), kind, epoch, actor, coalesce(left(message_id, 8), '-'), coalesce(receive_count::text, '-'), detail) FROM events WHERE job_id = '$job' ORDER BY seq"
  done
fi
exit "$status"
