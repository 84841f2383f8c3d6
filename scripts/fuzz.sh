#!/usr/bin/env bash
# Fuzzes API v1 from its own OpenAPI document with schemathesis (PyPI, in the test
# virtualenv): no generated request may get a 5xx. Runs the debug binary on a temporary SQLite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

venv="${FENCELINE_VENV:-$HOME/.cache/fenceline/venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if [ ! -x "$venv/bin/st" ]; then
  echo "== installing schemathesis from PyPI into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'schemathesis==4.32.5'
fi
[ "${FENCELINE_BIN_BUILT:-}" = 1 ] || cargo build --locked -p fenceline
bin=target/debug/fenceline
dir=$(mktemp -d /tmp/fenceline-fuzz.XXXXXX)
_fenceline_cleanups+=("rm -rf '$dir'")
db="sqlite://$dir/fuzz.sqlite?mode=rwc"
port=$(free_port)
token=$("$bin" token add fuzz --database-url "$db" 2>/dev/null)
"$bin" serve --no-worker --database-url "$db" --bind "127.0.0.1:$port" >"$dir/serve.log" 2>&1 &
pid=$!
_fenceline_cleanups+=("kill $pid 2>/dev/null")
for _ in $(seq 1 100); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/readyz')" 2>/dev/null && break
  sleep 0.1
done
"$venv/bin/st" run "http://127.0.0.1:$port/api/v1/openapi.json" --url "http://127.0.0.1:$port/api/v1" \
  -H "Authorization: Bearer $token" --checks not_a_server_error --max-examples 100 --seed 1 --no-color
