#!/usr/bin/env bash
# Builds this plugin: ./build.sh [OUT_DIR]  ->  OUT_DIR/NAME.wasm, NAME being this directory's
# name (OUT_DIR defaults to this directory). The WIT and the SDK modules (wasmgear*.js) are taken
# from beside this script (a project made by `wasmgear new`), else from the repository. Installs componentize-js with npm under
# ${WASMGEAR_TOOLS:-~/.cache/wasmgear-tools} when it is missing; nothing is written to the
# repository but the .wasm (no node_modules here).
#
# WASMGEAR_JS_HTTP=1 keeps wasi:http in the component (for plugins that use fetch); by default
# it is left out (`-d http fetch-event`), so the component imports no wasi:http at all.
#
# The WIT world is $WASMGEAR_WORLD, else `batch` when app.js exports a batch handler (a line
# starting `export const batchHandler`), else `resumable` (one job per call, with child jobs,
# dependencies and checkpoints).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wit="$here/wit"
sdk="$here"
if [[ ! -d "$wit" ]]; then
    root="$(cd "$here/../.." && pwd)"
    wit="$root/wit"
    sdk="$root/guest-sdk/js"
fi
out_dir="${1:-$here}"
name="$(basename "$here")"
world="${WASMGEAR_WORLD:-}"
if [[ -z "$world" ]]; then
    world=resumable
    if grep -Eq '^export const batchHandler([^[:alnum:]_$]|$)' "$here/app.js"; then
        world=batch
    fi
fi

COMPONENTIZE_JS_VERSION=0.23.0
tools="${WASMGEAR_TOOLS:-$HOME/.cache/wasmgear-tools}"
prefix="$tools/componentize-js-$COMPONENTIZE_JS_VERSION"
cjs="$prefix/node_modules/.bin/componentize-js"
if [[ ! -x "$cjs" ]]; then
    echo "installing componentize-js $COMPONENTIZE_JS_VERSION into $prefix" >&2
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error \
        "@bytecodealliance/componentize-js@$COMPONENTIZE_JS_VERSION"
fi

disable=(-d http fetch-event)
if [[ "${WASMGEAR_JS_HTTP:-0}" == 1 ]]; then
    disable=()
fi

# componentize-js maps the entry module's directory into the engine while it pre-initializes:
# stage the app beside the SDK so that `import ... from './wasmgear.js'` resolves (and the SDK's
# own imports of `./wasmgear-core.js`).
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$here/app.js" "$sdk"/wasmgear*.js "$stage/"

mkdir -p "$out_dir"
out="$(cd "$out_dir" && pwd)/$name.wasm"
(cd "$stage" && "$cjs" --wit "$wit" --world-name "$world" "${disable[@]}" -o "$out.tmp" app.js)
mv "$out.tmp" "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)" >&2
