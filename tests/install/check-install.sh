#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs a consumer through the
# CMake package and through pkg-config.
set -euo pipefail
build_dir=$1
src_dir=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cmake --install "$build_dir" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src_dir" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}" "$tmp/cmake-build/consumer"

libdir=$(dirname "$(find "$tmp/prefix" -name ember.pc | head -n1)")
export PKG_CONFIG_PATH="$libdir"
cc -std=c99 -pedantic -Werror "$src_dir/consumer.c" $(pkg-config --cflags --libs ember) -o "$tmp/consumer-pc"
LD_LIBRARY_PATH="$libdir/..:${LD_LIBRARY_PATH:-}" "$tmp/consumer-pc"

# The examples against the installed package, as a new user builds them: simple.c (C) and
# chat.cpp (the installed ember.hpp) with pkg-config's flags; simple.c prints text from the
# default model.
repo=$(cd "$src_dir/../.." && pwd)
cc -std=c99 -pedantic -Wall -Wextra -Werror "$repo/examples/simple.c" $(pkg-config --cflags --libs ember) -o "$tmp/simple"
c++ -std=c++17 -Wall -Wextra -Werror "$repo/examples/chat.cpp" $(pkg-config --cflags --libs ember) -o "$tmp/chat"
out=$(LD_LIBRARY_PATH="$libdir/..:${LD_LIBRARY_PATH:-}" "$tmp/simple" "$repo/models/ember-kjv-25m-q8_0.gguf" "And God said" 4)
case "$out" in
    "And God said"??*) ;;
    *) echo "examples/simple.c built against the installed package printed: '$out'"; exit 1 ;;
esac
echo "install check passed"
