#!/usr/bin/env bash
# Installs kiln from a build tree into a temporary prefix, then configures, builds and runs
# tests/downstream against that install: what a user's find_package(kiln) project does.
set -euo pipefail
build="$1"
src="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/downstream" -B "$tmp/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
ninja -C "$tmp/build" >/dev/null
"$tmp/build/downstream"
