#!/usr/bin/env bash
# Installs the real client libraries of the queues wasmgear serves, for the tests that drive a
# worker with them: redis-work-queue 0.1.5 for Python (PyPI) and for Node.js (npm), each under
# ${WASMGEAR_TOOLS:-~/.cache/wasmgear-tools}. Idempotent: what is there is left alone.
set -euo pipefail

tools="${WASMGEAR_TOOLS:-$HOME/.cache/wasmgear-tools}"
mkdir -p "$tools"

py="$tools/redis-work-queue-py-0.1.5"
if [[ ! -x "$py/bin/python" ]] || ! "$py/bin/python" -c 'import redis_work_queue' 2>/dev/null; then
    echo "installing redis-work-queue 0.1.5 (PyPI) into $py" >&2
    rm -rf "$py"
    python3 -m venv "$py"
    "$py/bin/pip" install --quiet "redis-work-queue==0.1.5" "redis==5.2.1"
fi

node="$tools/redis-work-queue-node-0.1.5"
if [[ ! -d "$node/node_modules/@mevitae/redis-work-queue" ]]; then
    echo "installing @mevitae/redis-work-queue 0.1.5 (npm) into $node" >&2
    mkdir -p "$node"
    npm install --silent --no-audit --no-fund --prefix "$node" "@mevitae/redis-work-queue@0.1.5" >/dev/null
fi
