#!/usr/bin/env bash
# Builds this plugin: ./build.sh [OUT_DIR]  ->  OUT_DIR/NAME.wasm, NAME being this directory's
# name (OUT_DIR defaults to this directory). The WIT and the SDK module are taken from beside
# this script (a project made by `wasmgear new`), else from the repository. Installs componentize-py into a venv under
# ${WASMGEAR_TOOLS:-~/.cache/wasmgear-tools} when it is missing; nothing is written to the
# repository but the .wasm (the generated bindings live in a temporary directory).
#
# The WIT world is $WASMGEAR_WORLD, else `batch` when app.py defines a batch plugin (a line
# starting `@wasmgear.batch`), else `resumable` (one job per call, with child jobs,
# dependencies and checkpoints).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
wit="$here/wit"
sdk="$here/wasmgear.py"
if [[ ! -d "$wit" ]]; then
    root="$(cd "$here/../.." && pwd)"
    wit="$root/wit"
    sdk="$root/guest-sdk/python/wasmgear.py"
fi
out_dir="${1:-$here}"
name="$(basename "$here")"
world="${WASMGEAR_WORLD:-}"
if [[ -z "$world" ]]; then
    world=resumable
    if grep -Eq '^@wasmgear\.batch([^[:alnum:]_]|$)' "$here/app.py"; then
        world=batch
    fi
fi

COMPONENTIZE_PY_VERSION=0.25.1
tools="${WASMGEAR_TOOLS:-$HOME/.cache/wasmgear-tools}"
venv="$tools/componentize-py-$COMPONENTIZE_PY_VERSION"
cpy="$venv/bin/componentize-py"
if [[ ! -x "$cpy" ]]; then
    echo "installing componentize-py $COMPONENTIZE_PY_VERSION into $venv" >&2
    mkdir -p "$tools"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "componentize-py==$COMPONENTIZE_PY_VERSION"
fi

# componentize-py bundles whole directories of its Python path: stage only the app and the
# SDK, so that nothing else (an earlier .wasm, caches) ends up inside the component.
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp "$here/app.py" "$sdk" "$stage/"

mkdir -p "$out_dir"
out="$(cd "$out_dir" && pwd)/$name.wasm"
# Run from the stage with no virtualenv active, so no site-packages are added to the path.
(cd "$stage" && env -u VIRTUAL_ENV "$cpy" -d "$wit" -w "$world" componentize app -p "$stage" -o "$out.tmp")
mv "$out.tmp" "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)" >&2
