# Helpers that start throwaway services for tests and benchmarks. Source, don't run.
# Every service lives in a temporary folder, listens on loopback only, and is stopped on exit.

_fenceline_lib=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_fenceline_cleanups=()
_fenceline_cleanup() {
  local i
  for ((i = ${#_fenceline_cleanups[@]} - 1; i >= 0; i--)); do
    eval "${_fenceline_cleanups[$i]}" || true
  done
}
trap _fenceline_cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

find_pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then PG_BIN="$d"; fi
  done
  [ -n "${PG_BIN:-}" ]
}

# start_postgres [extra postgres -c settings...]: sets PG_URL (database "postgres", trust auth).
start_postgres() {
  if ! find_pg_bin; then
    echo "== installing PostgreSQL from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
    find_pg_bin || { echo "PostgreSQL binaries not found after install" >&2; return 1; }
  fi
  local dir port run_as=()
  dir=$(mktemp -d /tmp/fenceline-pg.XXXXXX)
  port=$(free_port)
  if [ "$(id -u)" = 0 ]; then
    # initdb refuses to run as root.
    id postgres >/dev/null 2>&1 || useradd --system --home-dir "$dir" postgres
    chown postgres "$dir"
    run_as=(runuser -u postgres --)
  fi
  (cd /tmp && "${run_as[@]}" "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust \
      --encoding=UTF8 --locale=C >"$dir/initdb.log" 2>&1) \
    || { cat "$dir/initdb.log" >&2; return 1; }
  local settings=(-c "port=$port" -c "listen_addresses=127.0.0.1" -c "unix_socket_directories=$dir"
    -c "max_connections=400" "$@")
  (cd /tmp && "${run_as[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
      -o "${settings[*]}" start >/dev/null) \
    || { cat "$dir/server.log" >&2; return 1; }
  _fenceline_cleanups+=("(cd /tmp && ${run_as[*]} '$PG_BIN/pg_ctl' -D '$dir/data' -m immediate stop >/dev/null 2>&1); rm -rf '$dir'")
  PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
  # For a restart mid-run (the chaos soak): pg_ctl -D "$PG_DATA" restart, as $PG_RUN_AS.
  PG_DATA="$dir/data"
  PG_RUN_AS="${run_as[*]}"
  echo "== PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$port"
}

# pip_tool VENV EXE SPEC: makes sure VENV has EXE, installing SPEC from PyPI when it has not.
pip_tool() {
  local venv=$1 exe=$2 spec=$3
  if [ ! -x "$venv/bin/$exe" ]; then
    echo "== installing $spec from PyPI into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "$spec"
  fi
}

# wait_http URL TRIES LOG: waits (0.2 s a try) until URL answers 2xx; on giving up prints LOG.
wait_http() {
  local url=$1 tries=$2 log=$3 i
  for i in $(seq 1 "$tries"); do
    if python3 -c "import urllib.request; urllib.request.urlopen('$url')" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  cat "$log" >&2
  return 1
}

# start_moto: an SQS protocol peer (moto_server from PyPI, in a virtualenv) on loopback,
# through scripts/lib/moto_server.py: moto's server with its queues' message lists changed
# under their own lock (moto 5.2.5 can lose a message sent during a delete; SQS never does).
# Sets MOTO_URL and the AWS variables the SDK reads.
start_moto() {
  local venv="${FENCELINE_VENV:-$HOME/.cache/fenceline/venv}"
  pip_tool "$venv" moto_server 'moto[server]==5.2.5'
  local port dir
  port=$(free_port)
  dir=$(mktemp -d /tmp/fenceline-moto.XXXXXX)
  "$venv/bin/python3" "$_fenceline_lib/moto_server.py" -H 127.0.0.1 -p "$port" \
    >"$dir/moto.log" 2>&1 &
  local pid=$!
  _fenceline_cleanups+=("kill $pid 2>/dev/null; rm -rf '$dir'")
  wait_http "http://127.0.0.1:$port/moto-api/" 100 "$dir/moto.log"
  MOTO_URL="http://127.0.0.1:$port"
  export AWS_ENDPOINT_URL_SQS="$MOTO_URL" AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
    AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true
  echo "== moto_server on $MOTO_URL"
}

# start_litellm: LiteLLM's proxy (PyPI, pinned, in a virtualenv) on loopback as a real
# OpenAI-compatible server, serving mocked models with no model behind them: `fast` answers at
# once, `slow` after 4 s. It has no stored-completions listing (GET answers 405). Sets
# FENCELINE_TEST_LITELLM_URL and FENCELINE_TEST_LITELLM_KEY (a random master key).
start_litellm() {
  local venv="${FENCELINE_LITELLM_VENV:-$HOME/.cache/fenceline/litellm}"
  pip_tool "$venv" litellm 'litellm[proxy]==1.108.7'
  local port dir key
  port=$(free_port)
  dir=$(mktemp -d /tmp/fenceline-litellm.XXXXXX)
  key="sk-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
  cat >"$dir/config.yaml" <<'YAML'
model_list:
  - model_name: fast
    litellm_params: { model: openai/fast, api_key: unused, mock_response: "mocked answer" }
  - model_name: slow
    litellm_params: { model: openai/slow, api_key: unused, mock_response: "late answer", mock_delay: 4 }
litellm_settings:
  telemetry: false
YAML
  (cd "$dir" && LITELLM_MASTER_KEY="$key" LITELLM_LOCAL_MODEL_COST_MAP=True \
    exec "$venv/bin/litellm" --config "$dir/config.yaml" --host 127.0.0.1 --port "$port" \
    >"$dir/litellm.log" 2>&1) &
  local pid=$!
  _fenceline_cleanups+=("kill $pid 2>/dev/null; rm -rf '$dir'")
  # It takes a while to start on two busy cores.
  wait_http "http://127.0.0.1:$port/health/liveliness" 600 "$dir/litellm.log"
  export FENCELINE_TEST_LITELLM_URL="http://127.0.0.1:$port/v1" FENCELINE_TEST_LITELLM_KEY="$key"
  echo "== LiteLLM proxy (OpenAI-compatible) on $FENCELINE_TEST_LITELLM_URL"
}
