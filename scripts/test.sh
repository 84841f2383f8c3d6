#!/usr/bin/env bash
# Runs every test Fenceline has, on a fresh machine too:
#   formatting, clippy (-D warnings), unit tests, the integration suite against SQLite, a
#   throwaway PostgreSQL and an SQS peer that this script starts (and stops) itself, API fuzzing
#   from the OpenAPI document, the deployment files (scripts/check-deploy.sh), the browser tests,
#   and a short chaos soak on each queue and on background responses.
# Needs: the Rust toolchain and python3. Installs PostgreSQL and Chromium from Debian's packages,
# moto[server], litellm[proxy], schemathesis and kubernetes-validate from PyPI (in virtualenvs),
# and Playwright and dockerfile-utils from npm, when the machine has none.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

logs=$(mktemp -d /tmp/fenceline-test.XXXXXX)
_fenceline_cleanups+=("rm -rf '$logs'")

start_postgres
export FENCELINE_TEST_PG_URL="$PG_URL"
start_moto
start_litellm

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test (SQLite, PostgreSQL at $PG_URL, SQS at $MOTO_URL, LiteLLM at $FENCELINE_TEST_LITELLM_URL)"
# A failed test ends its output with what it says went wrong, not with a backtrace.
RUST_BACKTRACE=0 cargo test --workspace --locked 2>&1 | tee "$logs/cargo.log"

echo "== deployment files: Kubernetes schemas, systemd units, the Containerfile (scripts/check-deploy.sh)"
scripts/check-deploy.sh

echo "== API fuzzing from the OpenAPI document (schemathesis): no 5xx"
FENCELINE_BIN_BUILT=1 scripts/fuzz.sh

echo "== browser tests (Playwright + Chromium)"
FENCELINE_BIN_BUILT=1 scripts/e2e.sh 2>&1 | tee "$logs/e2e.log"

echo "== chaos soak, short: embedded queue, an SQS endpoint, then background responses (the documented runs: docs/reliability.md)"
scripts/soak.sh --jobs 600 --workers 3 --limit 300 --bin target/debug/fenceline 2>&1 | tee "$logs/soak.log"
scripts/soak.sh --jobs 300 --workers 3 --queue sqs --limit 300 --bin target/debug/fenceline 2>&1 | tee -a "$logs/soak.log"
# Background responses on their stand-in: workers killed mid-call end their jobs by adoption.
# The documented 2000-job run holds `unknown` to 1 %; this sample of 400 is allowed 2 %.
scripts/soak.sh --jobs 400 --workers 3 --limit 300 --provider openai-responses --max-unknown 0.02 \
  --bin target/debug/fenceline 2>&1 | tee -a "$logs/soak.log"
soaks=$(grep -c '^verdict: every invariant held' "$logs/soak.log" || true)

passed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($i ~ /^passed;?$/) p += $(i-1) } END { print p + 0 }' "$logs/cargo.log")
failed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($i ~ /^failed;?$/) f += $(i-1) } END { print f + 0 }' "$logs/cargo.log")
e2e=$(grep -Eo '^ +[0-9]+ passed' "$logs/e2e.log" | tail -1 | tr -dc '0-9')
echo "tests: $((passed + ${e2e:-0} + soaks)) passed, $failed failed"
