#!/usr/bin/env bash
# Builds this C plugin: ./build.sh [OUT_DIR] -> OUT_DIR/NAME.wasm, NAME being this directory's
# name (OUT_DIR defaults to this directory). Compiles every *.c here with clang-19 for
# wasm32-wasi (a reactor core module), then `wasmgear componentize` makes it a component
# (embedding the world's type and the WASI p1 reactor adapter).
#
# The WIT world is $WASMGEAR_WORLD, else `batch` when a source includes "batch.h" (a batch
# plugin), else `resumable` (one job per call, with child jobs, dependencies and checkpoints),
# whose bindings are named `job` (job.h, job.c, job_component_type.o).
#
# Works inside the wasmgear repository (headers in ../../guest-sdk/c) and in a project made by
# `wasmgear new --lang c` (wasmgear*.h and gen/ next to this script; the local files win when
# present). Bindings come from gen/ when it holds them (job.h, or batch.h for a batch plugin),
# otherwise `wasmgear bindings c` writes them into a temporary directory. The wasmgear binary is
# ${WASMGEAR:-wasmgear}. Needs the Debian packages clang-19 lld-19 wasi-libc
# libclang-rt-19-dev-wasm32 (installed with apt-get when missing and running as root).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="$(basename "$here")"
out_dir="${1:-$here}"
sources=("$here"/*.c)

world="${WASMGEAR_WORLD:-}"
if [[ -z "$world" ]]; then
    world=resumable
    if grep -q '^[[:space:]]*#[[:space:]]*include[[:space:]]*"batch.h"' "${sources[@]}"; then
        world=batch
    fi
fi
case "$world" in
    batch) bindings=batch ;;
    *) bindings=job ;;
esac

# The SDK header: the project's own copy, else the repository's.
if [[ -f "$here/wasmgear.h" ]]; then
    sdk="$here"
elif [[ -f "$here/../../guest-sdk/c/wasmgear.h" ]]; then
    sdk="$(cd "$here/../../guest-sdk/c" && pwd)"
else
    echo "build.sh: wasmgear.h not found (next to build.sh or in ../../guest-sdk/c)" >&2
    exit 1
fi

# The wasmgear binary: $WASMGEAR, else `wasmgear` on PATH, else the repository's newest build.
wasmgear="${WASMGEAR:-wasmgear}"
if [[ -z "${WASMGEAR:-}" ]] && ! command -v wasmgear >/dev/null 2>&1; then
    for candidate in "$here/../../target/release/wasmgear" "$here/../../target/debug/wasmgear"; do
        if [[ -x "$candidate" && ( "$wasmgear" == wasmgear || "$candidate" -nt "$wasmgear" ) ]]; then
            wasmgear="$candidate"
        fi
    done
fi
if ! command -v "$wasmgear" >/dev/null 2>&1; then
    echo "build.sh: the wasmgear binary ($wasmgear) was not found: set WASMGEAR=/path/to/wasmgear" >&2
    exit 1
fi

# The toolchain (Debian's default clang is too old, and its wasi-libc has only wasm32-wasi).
packages=(clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32)
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    for package in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" ||
            missing+=("$package")
    done
elif ! command -v clang-19 >/dev/null 2>&1; then
    missing=("${packages[@]}")
fi
if ((${#missing[@]})); then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "installing ${missing[*]}" >&2
        apt-get install -y -q "${missing[@]}" >&2 ||
            { apt-get update -q >&2 && apt-get install -y -q "${missing[@]}" >&2; }
    else
        echo "build.sh: missing ${missing[*]}: apt-get install ${packages[*]}" >&2
        exit 1
    fi
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The bindings of the world: the project's gen/, else freshly generated.
if [[ -f "$here/gen/$bindings.h" ]]; then
    gen="$here/gen"
else
    gen="$tmp/gen"
    "$wasmgear" bindings c --world "$world" "$gen" >/dev/null
fi

clang-19 --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra -Wl,--strip-debug \
    -I "$gen" -I "$sdk" \
    "${sources[@]}" "$gen/$bindings.c" "$gen/${bindings}_component_type.o" \
    -o "$tmp/core.wasm"
"$wasmgear" componentize "$tmp/core.wasm" -o "$tmp/$name.wasm" >/dev/null

mkdir -p "$out_dir"
out="$(cd "$out_dir" && pwd)/$name.wasm"
mv "$tmp/$name.wasm" "$out.tmp"
mv "$out.tmp" "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)" >&2
