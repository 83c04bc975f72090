#!/usr/bin/env bash
# Run interlock's benchmarks under Python 3.12 against their pinned peers.
#
#   bash bench/run.sh                 # everything (about 2-3 minutes on 2 cores)
#   bash bench/run.sh inprocess       # ping-pong + 10k waiters vs RoomKit and a raw Future
#   bash bench/run.sh durable         # sqlite cycle vs raw sqlite3 and LangGraph, 100 agents
#   bash bench/run.sh profile         # cProfile of interlock's memory and sqlite ping-pong, per-call costs
#   bash bench/run.sh schema          # what each part of interlock's SQLite schema costs
#   bash bench/run.sh inprocess --reps 3   # extra args go to the script
#   bash bench/run.sh http            # HTTP round trips + SSE fan-out vs awaithumans 0.1.12 (own venv, ~3 min)
#   bash bench/run.sh park            # park/resume cycles vs LangGraph and DBOS, SQLite and PostgreSQL (~10 min)
#
# Environment:
#   BENCH_VENV   venv to use/create (default: ~/.cache/interlock-bench/py312, outside the repo)
#   BENCH_PYTHON interpreter to create it with (default: python3.12 on PATH, else pyenv's 3.12.1)
#   BENCH_OUT    directory for the result files (default: a fresh temporary directory)
#
#   BENCH_HTTP_VENV venv for `http` (default: ~/.cache/interlock-bench/http, made with python3.11 or python3)
#
# The venv gets: roomkit==0.109.* (needs Python >= 3.12), langgraph,
# langgraph-checkpoint-sqlite, and this checkout of interlock (editable).
# `http` uses a venv of its own: interlock's server and test deps (editable) and
# awaithumans[server]==0.1.12 side by side.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"

if [[ "${1:-}" == "http" ]]; then
  shift
  hvenv="${BENCH_HTTP_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/interlock-bench/http}"
  if [[ ! -x "$hvenv/bin/python" ]]; then
    hpy="$(command -v python3.11 || command -v python3)"
    echo ">> creating $hvenv with $hpy"
    "$hpy" -m venv "$hvenv"
  fi
  "$hvenv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  "$hvenv/bin/python" -m pip install -q -e "$repo[test]" fastapi 'uvicorn[standard]' sse-starlette httpx httpx-sse \
    jinja2 itsdangerous prometheus-client python-multipart py-spy 'awaithumans[server]==0.1.12'
  out="${BENCH_OUT:-$(mktemp -d -t interlock-bench-out-XXXXXX)}"
  mkdir -p "$out"
  echo ">> $("$hvenv/bin/python" --version), results also in $out"
  "$hvenv/bin/python" "$here/http_roundtrip.py" --json "$out/http.json" "$@" | tee "$out/http.txt"
  exit 0
fi

venv="${BENCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/interlock-bench/py312}"

pick_python() {
  if [[ -n "${BENCH_PYTHON:-}" ]]; then echo "$BENCH_PYTHON"; return; fi
  for c in python3.12 "$(command -v pyenv >/dev/null && pyenv root)/versions/3.12.1/bin/python"; do
    if [[ -x "$(command -v "$c" 2>/dev/null || echo "$c")" ]] && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      echo "$c"; return
    fi
  done
  echo "no Python 3.12 found: set BENCH_PYTHON" >&2; exit 1
}

if [[ ! -x "$venv/bin/python" ]]; then
  py="$(pick_python)"
  echo ">> creating $venv with $py"
  "$py" -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$py" -m pip install -q 'roomkit==0.109.*' langgraph langgraph-checkpoint-sqlite
"$py" -m pip install -q -e "$repo"

what="${1:-all}"
[[ $# -gt 0 ]] && shift
out="${BENCH_OUT:-$(mktemp -d -t interlock-bench-out-XXXXXX)}"
mkdir -p "$out"
echo ">> $("$py" --version), results also in $out"

case "$what" in
  inprocess) "$py" "$here/inprocess.py" --json "$out/inprocess.json" "$@" | tee "$out/inprocess.txt" ;;
  durable)   "$py" "$here/durable.py" --json "$out/durable.json" "$@" | tee "$out/durable.txt" ;;
  profile)
    "$py" "$here/profile_interlock.py" memory "$@" | tee "$out/profile-memory.txt"
    "$py" "$here/profile_interlock.py" sqlite "$@" | tee "$out/profile-sqlite.txt"
    "$py" "$here/profile_interlock.py" ops | tee "$out/ops.txt" ;;
  schema)    "$py" "$here/sqlite_schema.py" "$@" | tee "$out/schema.txt" ;;
  postgres)
    # needs PostgreSQL at 127.0.0.1:5432 and, for the LangGraph row, its Postgres saver
    "$py" -m pip install --quiet 'psycopg[binary]>=3.2,<4' 'psycopg-pool>=3.2,<4' langgraph-checkpoint-postgres
    "$py" "$here/postgres.py" "$@" | tee "$out/postgres.txt" ;;
  park)
    # needs PostgreSQL at 127.0.0.1:5432; LangGraph's savers and DBOS come with the bench extra
    "$py" -m pip install --quiet -e "$repo[bench]"
    "$py" "$here/park_resume.py" --json "$out/park_resume.json" "$@" | tee "$out/park_resume.txt" ;;
  all)
    "$py" "$here/inprocess.py" --json "$out/inprocess.json" | tee "$out/inprocess.txt"
    echo
    "$py" "$here/durable.py" --json "$out/durable.json" | tee "$out/durable.txt" ;;
  *) echo "unknown benchmark: $what (inprocess | durable | profile | schema | http | postgres | park | all)" >&2; exit 2 ;;
esac
