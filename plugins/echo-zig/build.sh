#!/usr/bin/env bash
# Builds the echo-zig plugin: ./build.sh [OUT_DIR]  ->  OUT_DIR/echo-zig.wasm
# (OUT_DIR defaults to this directory; NAME is this directory's name). Installs Zig (PyPI
# `ziglang`) into a venv under ${WASMGEAR_TOOLS:-~/.cache/wasmgear-tools} when it is missing,
# compiles main.zig to a core module (wasm32-freestanding, hand-written canonical ABI), then
# makes it a job component with `wasmgear componentize` (set WASMGEAR to the wasmgear binary
# when it is not on PATH). Nothing is written to the repository but the .wasm.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out_dir="${1:-$here}"
name="$(basename "$here")"

ZIG_VERSION=0.17.1
tools="${WASMGEAR_TOOLS:-$HOME/.cache/wasmgear-tools}"
venv="$tools/ziglang-$ZIG_VERSION"
py="$venv/bin/python"
if ! "$py" -m ziglang version >/dev/null 2>&1; then
    echo "installing ziglang $ZIG_VERSION into $venv" >&2
    mkdir -p "$tools"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "ziglang==$ZIG_VERSION"
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

# -fno-entry: a library-like module with no _start; -rdynamic: keep every `export` symbol.
# The global cache (the compiled std) is kept with the tools so that rebuilds are fast.
(cd "$stage" && "$py" -m ziglang build-exe "$here/main.zig" \
    -target wasm32-freestanding -fno-entry -rdynamic -O ReleaseSmall \
    --cache-dir "$stage/zig-cache" --global-cache-dir "$tools/zig-global-cache-$ZIG_VERSION" \
    -femit-bin="$stage/core.wasm")

mkdir -p "$out_dir"
out="$(cd "$out_dir" && pwd)/$name.wasm"
"${WASMGEAR:-wasmgear}" componentize "$stage/core.wasm" -o "$out.tmp" >/dev/null
mv "$out.tmp" "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)" >&2
