#!/usr/bin/env bash
# Browser tests: Playwright (from npm, no browser download) driving Debian's Chromium against
# the debug `fenceline` binary on a temporary SQLite database. Installs what is missing.
# Screenshots land in end2end/test-results/.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

if [ ! -x /usr/bin/chromium ]; then
  echo "== installing Chromium from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium >/dev/null
fi
# scripts/test.sh has just built the binary with the tests; a lone run builds it here.
[ "${FENCELINE_BIN_BUILT:-}" = 1 ] || cargo build --locked -p fenceline
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
(cd end2end && npm ci --no-audit --no-fund --loglevel=error)

dir=$(mktemp -d /tmp/fenceline-e2e.XXXXXX)
_fenceline_cleanups+=("rm -rf '$dir'")
export FENCELINE_E2E_DATABASE_URL="sqlite://$dir/e2e.sqlite?mode=rwc"
export FENCELINE_E2E_PORT=$(free_port)
export FENCELINE_E2E_TOKEN=$(target/debug/fenceline token add e2e --database-url "$FENCELINE_E2E_DATABASE_URL" 2>/dev/null)
export FENCELINE_BIN="$PWD/target/debug/fenceline"
# Operators to sign in as (passwords from standard input, never from an argument).
export FENCELINE_E2E_PASSWORD="e2e-$(python3 -c 'import secrets; print(secrets.token_hex(12))')"
for who in operator viewer; do
  printf '%s\n' "$FENCELINE_E2E_PASSWORD" | "$FENCELINE_BIN" operator add "e2e-$who" --role "$who" \
    --password-stdin --database-url "$FENCELINE_E2E_DATABASE_URL" >/dev/null
done
# `unknown` jobs (a call that may have happened): N of tenant T, their ids on one line.
unknown_jobs() {
  local ids=""
  for _ in $(seq "$1"); do
    ids="$ids $("$FENCELINE_BIN" bench seed-timeline --database-url "$FENCELINE_E2E_DATABASE_URL" \
      --events 0 --pattern unknown --tenant "$2")"
  done
  echo "$ids"
}
# One to decide per project, one for the viewer; one per project to cancel from the jobs list;
# one per project to resolve as succeeded with the provider's reference.
export FENCELINE_E2E_UNKNOWN_JOBS=$(unknown_jobs 3 e2e-seed)
export FENCELINE_E2E_CANCEL_JOBS=$(unknown_jobs 2 e2e-cancel)
export FENCELINE_E2E_RESOLVE_JOBS=$(unknown_jobs 2 e2e-resolve)
# Two long timelines: one that pages (nothing folds), one long call whose renewals fold.
export FENCELINE_E2E_LONG_JOB=$("$FENCELINE_BIN" bench seed-timeline --database-url "$FENCELINE_E2E_DATABASE_URL" \
  --events 3000 --pattern alternating --tenant e2e-seed)
export FENCELINE_E2E_FOLDED_JOB=$("$FENCELINE_BIN" bench seed-timeline --database-url "$FENCELINE_E2E_DATABASE_URL" \
  --events 3000 --pattern renewals --tenant e2e-seed)
# A real OpenID provider (npm's oidc-provider) the console signs operators in through, beside
# local passwords: `admin-…` names land as admins, `acme-…` as operators of tenant acme.
export OIDC_PORT=$(free_port)
export OIDC_CLIENT_ID=fenceline-e2e
export OIDC_CLIENT_SECRET="e2e-$(python3 -c 'import secrets; print(secrets.token_hex(12))')"
export OIDC_REDIRECT_URI="http://127.0.0.1:$FENCELINE_E2E_PORT/login/oidc/callback"
(cd end2end && exec node oidc-provider.mjs) > "$dir/oidc.log" 2>&1 &
oidc_pid=$!
_fenceline_cleanups+=("kill $oidc_pid")
for _ in $(seq 50); do
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:$OIDC_PORT/.well-known/openid-configuration" 2>/dev/null && break
  sleep 0.2
done
export FENCELINE_PUBLIC_URL="http://127.0.0.1:$FENCELINE_E2E_PORT"
export FENCELINE_OIDC_ISSUER="http://127.0.0.1:$OIDC_PORT"
export FENCELINE_OIDC_CLIENT_ID=$OIDC_CLIENT_ID FENCELINE_OIDC_CLIENT_SECRET=$OIDC_CLIENT_SECRET
export FENCELINE_OIDC_GROUPS="fenceline-admins=admin;acme-ops=operator:acme"
export FENCELINE_OIDC_SCOPES="openid profile groups"
cd end2end
npx playwright test "$@"
