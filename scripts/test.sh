#!/usr/bin/env bash
# Runs every test Fenceline has, on a fresh machine too:
#   formatting, clippy (-D warnings), unit tests, and the integration suite against SQLite and
#   a throwaway PostgreSQL that this script starts (and stops) itself.
# Needs: the Rust toolchain. Installs PostgreSQL from Debian's packages when the machine has none.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

start_postgres
export FENCELINE_TEST_PG_URL="$PG_URL"

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test (SQLite and PostgreSQL at $PG_URL)"
cargo test --workspace --locked

echo "== browser tests (Playwright + Chromium)"
scripts/e2e.sh
