#!/usr/bin/env bash
# Installs the real client libraries of the queues wasmgear serves, for the tests that drive a
# worker with them: redis-work-queue 0.1.5 for Python (PyPI) and for Node.js (npm),
# qless-py 0.11.4 and python3-gearman 0.1.0 (PyPI), and schemathesis 4.32.5 (PyPI), which
# fuzzes the HTTP API against its own OpenAPI document, each under
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

qless="$tools/qless-py-0.11.4"
if [[ ! -x "$qless/bin/python" ]] || ! "$qless/bin/python" -c 'import qless' 2>/dev/null; then
    echo "installing qless-py 0.11.4 (PyPI) into $qless" >&2
    rm -rf "$qless"
    python3 -m venv "$qless"
    "$qless/bin/pip" install --quiet "qless-py==0.11.4" "redis==8.1.0"
fi
# qless-core's script defines `function table.extend`, an assignment to a global table that
# Redis 7 refuses ("Attempt to modify a readonly table"); the known fix makes it a local
# function and calls it so at its two call sites.
core=$(echo "$qless"/lib/python3*/site-packages/qless/qless-core/qless.lua)
if grep -q '^function table\.extend' "$core"; then
    sed -i -e 's/^function table\.extend(self, other)/local function table_extend(self, other)/' \
        -e 's/table\.extend(jids,/table_extend(jids,/g' "$core"
fi

gearman_py="$tools/python3-gearman-0.1.0"
if [[ ! -x "$gearman_py/bin/python" ]] || ! "$gearman_py/bin/python" -c 'import python3_gearman' 2>/dev/null; then
    echo "installing python3-gearman 0.1.0 (PyPI) into $gearman_py" >&2
    rm -rf "$gearman_py"
    python3 -m venv "$gearman_py"
    "$gearman_py/bin/pip" install --quiet "python3-gearman==0.1.0"
fi

schemathesis="$tools/schemathesis-4.32.5"
if [[ ! -x "$schemathesis/bin/st" ]] || ! "$schemathesis/bin/st" --version 2>/dev/null | grep -q '4\.32\.5'; then
    echo "installing schemathesis 4.32.5 (PyPI) into $schemathesis" >&2
    rm -rf "$schemathesis"
    python3 -m venv "$schemathesis"
    "$schemathesis/bin/pip" install --quiet "schemathesis==4.32.5"
fi
