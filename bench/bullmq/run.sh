#!/usr/bin/env bash
# Run the BullMQ side of the wasmgear comparison benchmark.
#
#   REDIS_URL=redis://127.0.0.1:6379 bash bench/bullmq/run.sh > bullmq.json
#
# Installs the bullmq/ioredis versions pinned in package.json into
# ${WASMGEAR_TOOLS:-$HOME/.cache/wasmgear-tools}/bullmq-<version> (outside the
# repo; nothing is written here), copies bench.mjs + processor.mjs there so
# `import 'bullmq'` resolves, and runs it. Only the result JSON goes to stdout.
# Env knobs (QUICK, JOBS, SANDBOX_JOBS, SINGLE_N, LAT_N, CONCURRENCIES, MODES)
# are documented in bench.mjs.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${REDIS_URL:?REDIS_URL must be set, e.g. redis://127.0.0.1:6379}"
export REDIS_URL

VERSION="$(node -p 'JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).dependencies.bullmq' "$HERE/package.json")"
PREFIX="${WASMGEAR_TOOLS:-$HOME/.cache/wasmgear-tools}/bullmq-$VERSION"

if [[ ! -f "$PREFIX/node_modules/bullmq/package.json" ]] || ! cmp -s "$HERE/package.json" "$PREFIX/package.json"; then
  echo "[bullmq-bench] installing bullmq $VERSION into $PREFIX" >&2
  mkdir -p "$PREFIX"
  cp "$HERE/package.json" "$PREFIX/package.json"
  npm install --prefix "$PREFIX" --no-audit --no-fund >&2
fi

cp "$HERE/bench.mjs" "$HERE/processor.mjs" "$PREFIX/"
cd "$PREFIX"
exec node "$PREFIX/bench.mjs"
