#!/usr/bin/env bash
# Checks the deployment files in deploy/, each with a tool made for it: the Kubernetes manifests
# against the Kubernetes schemas (kubernetes-validate, from PyPI), the settings they carry as the
# binary reads them, the systemd units with `systemd-analyze verify` (where it runs), and the
# Containerfile with a Dockerfile linter (dockerfile-utils, from npm). Nothing builds the image:
# no container builder runs on these machines.
# Needs the binary built (FENCELINE_BIN, target/debug/fenceline by default).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/services.sh

bin=${FENCELINE_BIN:-target/debug/fenceline}
cache=${FENCELINE_TOOLS:-$HOME/.cache/fenceline}
work=$(mktemp -d /tmp/fenceline-deploy.XXXXXX)
_fenceline_cleanups+=("rm -rf '$work'")

echo "== deploy/kubernetes against the Kubernetes 1.31 schemas (kubernetes-validate --strict)"
kv="$cache/kubernetes-validate"
pip_tool "$kv" kubernetes-validate 'kubernetes-validate==1.37.0'
"$kv/bin/kubernetes-validate" --strict --quiet -k 1.31 deploy/kubernetes/*.yaml
echo "   every resource validated"

echo "== the ConfigMap's settings file, read as the binary reads it"
"$kv/bin/python" - deploy/kubernetes/config.yaml >"$work/fenceline.toml" <<'PY'
import sys, yaml
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if doc and doc["kind"] == "ConfigMap":
        print(doc["data"]["fenceline.toml"])
PY
# Every key is one a command knows, every value one its flag takes (`drill list` reads the
# settings as every command does and needs no database).
"$bin" --config "$work/fenceline.toml" drill list >/dev/null
echo "   read without an error"

echo "== deploy/systemd (systemd-analyze verify)"
if command -v systemd-analyze >/dev/null; then
  # The units run /usr/local/bin/fenceline; verify them against the binary just built.
  for unit in deploy/systemd/*; do
    sed "s|/usr/local/bin/fenceline|$PWD/$bin|g" "$unit" >"$work/$(basename "$unit")"
  done
  said=$(systemd-analyze verify "$work"/*.service 2>&1 || true)
  if [ -n "$said" ]; then
    echo "$said"
    exit 1
  fi
  echo "   every unit verified"
else
  echo "   systemd-analyze is not on this machine: the units were not verified"
fi

echo "== deploy/Containerfile (dockerfile-utils lint; the image is not built here)"
lint="$cache/dockerfile-utils"
if [ ! -x "$lint/node_modules/.bin/dockerfile-utils" ]; then
  npm install --prefix "$lint" --no-audit --no-fund --silent dockerfile-utils@0.16.3
fi
"$lint/node_modules/.bin/dockerfile-utils" lint deploy/Containerfile
echo "   linted without a finding"
