#!/usr/bin/env bash
# Builds this Rust plugin: ./build.sh [OUT_DIR] -> OUT_DIR/NAME.wasm, NAME being this
# directory's name (OUT_DIR defaults to this directory). Needs Rust with the wasm32-wasip2
# target (`rustup target add wasm32-wasip2`); honours CARGO_TARGET_DIR.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="$(basename "$here")"
out_dir="${1:-$here}"

rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
# From the project directory, so that its .cargo/config.toml (the stack size) applies.
(cd "$here" && cargo build --target wasm32-wasip2 --release --quiet)
# Cargo names the artifact after the crate, with '-' as '_'.
metadata="$(cargo metadata --manifest-path "$here/Cargo.toml" --format-version 1 --no-deps)"
target_dir="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])' <<<"$metadata")"
built="$target_dir/wasm32-wasip2/release/${name//-/_}.wasm"
mkdir -p "$out_dir"
cp "$built" "$out_dir/$name.wasm.tmp"
mv "$out_dir/$name.wasm.tmp" "$out_dir/$name.wasm"
echo "wrote $out_dir/$name.wasm ($(stat -c %s "$out_dir/$name.wasm") bytes)" >&2
