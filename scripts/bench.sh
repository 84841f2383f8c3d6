#!/usr/bin/env bash
# The ledger benchmark, on both backends, each beside its baseline in the same invocation:
#   scripts/bench.sh [--owners N] [--jobs N]
# PostgreSQL runs with durable commits (fsync on, synchronous_commit on) in a throwaway
# cluster; SQLite runs in WAL with synchronous=FULL in a temporary file.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

cargo build --release --locked -p fenceline
bin=target/release/fenceline
start_postgres -c shared_buffers=256MB

echo
echo "== $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%dT%H:%MZ)"
"$bin" bench ledger --database-url "$PG_URL" "$@"
sqlite_dir=$(mktemp -d /tmp/fenceline-bench.XXXXXX)
_fenceline_cleanups+=("rm -rf '$sqlite_dir'")
"$bin" bench ledger --database-url "sqlite://$sqlite_dir/bench.sqlite?mode=rwc" \
  --sqlite-synchronous full "$@"
