#!/usr/bin/env bash
# A clean copy of the tree for a call on the lent GPU machine (the `run` tool), in .devpack/:
# the committed tree (HEAD, without models/), the working-tree versions of the files named on
# the command line, the dependencies of .devdata/deps and, with EMBER_PACK_FIXTURES="Q4_0 Q8_0",
# the fixture models of those weight types. Run the call from it:
#
#     scripts/device-pack.sh backends/cuda/ops-matvec-q.cu tests/backends/test_cuda_ops.cpp
#     run(command="cd .devpack && scripts/bench-gpu.sh ...", carry=[".devpack"])
#
# HEAD's versions of the named files go to .devpack/.ab-head/ (scripts/ab-gpu.sh: your edits
# against HEAD in one call). Files edited or new but not named are packed as HEAD has them; the
# script warns about each (Markdown files aside).
#
# Why: a call carries the whole working tree, so several engineers' unfinished edits travel
# with it (one that breaks the CUDA module's link spoils everyone's benchmark), and the tree
# (~30 MB, mostly the default model) plus all of .devdata (~35 MB of fixtures) is over the
# 64 MiB a call may carry. The pack is ~5 MB, ~25 MB with four fixture types.
# The default model's reference files (for its GPU tests: .devpack/.devdata/models, ~28 MB, from
# ../shared/models) fit beside a pack without fixtures, not beside one with them: the tree itself
# travels too. When your edits are the only ones in the tree, skip the pack instead: put what the
# tests need under .devdata/ (deps, models/, fixtures/models/ of a few types: ~33 MB), run from the
# tree's root with carry=[".devdata"] and EMBER_SHARED_DIR=$PWD/.devdata (session 41).
set -euo pipefail
cd "$(dirname "$0")/.."
pack=.devpack
# The call scripts written into the last pack (.devpack/call*.sh) are kept: a new pack for the
# next call should not lose the script that runs it.
keep=$(mktemp -d)
cp "$pack"/call*.sh "$keep"/ 2>/dev/null || true
rm -rf "$pack"
mkdir -p "$pack"
cp "$keep"/call*.sh "$pack"/ 2>/dev/null || true
rm -rf "$keep"
git archive HEAD -- . ':(exclude)models' | tar -x -C "$pack"
for f in "$@"; do
    [ -f "$f" ] || { echo "device-pack: no file $f" >&2; exit 1; }
    mkdir -p "$pack/$(dirname "$f")"
    # HEAD's version beside it, for scripts/ab-gpu.sh (the A side of an A/B call); none for a new file
    if git cat-file -e "HEAD:$f" 2>/dev/null; then
        mkdir -p "$pack/.ab-head/$(dirname "$f")"
        git show "HEAD:$f" >"$pack/.ab-head/$f"
    fi
    cp "$f" "$pack/$f"
done
# .devdata/deps: what the device image lacks for the build and tests (libxxhash, doctest's
# header and CMake config), made here from Debian's packages when missing (a fresh machine).
if [ ! -d .devdata/deps ] && [ -f /usr/include/xxhash.h ] && [ -f /usr/lib/cmake/doctest/doctestConfig.cmake ]; then
    d=.devdata/deps
    mkdir -p $d/include $d/lib/pkgconfig $d/lib/cmake
    cp /usr/include/xxhash.h /usr/include/xxh3.h $d/include/
    cp -r /usr/include/doctest $d/include/
    cp /usr/lib/x86_64-linux-gnu/libxxhash.a $d/lib/  # static: nothing to find at run time there
    printf 'prefix=${pcfiledir}/../..\nincludedir=${prefix}/include\nlibdir=${prefix}/lib\n\nName: xxhash\nDescription: xxhash\nVersion: 0.8.1\nLibs: -L${libdir} -lxxhash\nCflags: -I${includedir}\n' \
        >$d/lib/pkgconfig/libxxhash.pc
    cp -r /usr/lib/cmake/doctest $d/lib/cmake/
    sed -i 's|set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
        $d/lib/cmake/doctest/doctestTargets.cmake
fi
if [ ! -d .devdata/deps ]; then
    echo "device-pack: no .devdata/deps and no libxxhash-dev / doctest-dev here to make it from (apt-get install libxxhash-dev doctest-dev): the device build would stop at its configure" >&2
    exit 1
fi
if [ -d .devdata/deps ]; then
    mkdir -p "$pack/.devdata"
    cp -r .devdata/deps "$pack/.devdata/"
fi
if [ -n "${EMBER_PACK_FIXTURES:-}" ]; then
    src=.devdata/fixtures/models
    [ -d "$src" ] || src=../shared/fixtures/models
    mkdir -p "$pack/.devdata/fixtures/models"
    cp "$src/README.md" "$src/manifest.json" "$pack/.devdata/fixtures/models/"
    for q in $EMBER_PACK_FIXTURES; do
        ls "$src"/tiny-*-"$q".* >/dev/null 2>&1 || { echo "device-pack: no fixtures of type $q" >&2; exit 1; }
        cp "$src"/tiny-*-"$q".* "$pack/.devdata/fixtures/models/"
    done
fi
# Edits not named travel nowhere: the pack is HEAD for them (an A/B of uncommitted work told apart
# only by EMBER_AB_ENV_* would measure HEAD twice). Name each one, or commit first.
# New files not yet added to git are left out the same way.
left=()
while IFS= read -r f; do
    named=0
    for a in "$@"; do [ "${a#./}" = "$f" ] && named=1; done
    [ "$named" = 0 ] && left+=("$f")
done < <(git diff --name-only HEAD -- . ':(exclude)models' ':(exclude)*.md'
         git ls-files --others --exclude-standard -- . ':(exclude)models' ':(exclude)*.md')
if [ ${#left[@]} -gt 0 ]; then
    echo "device-pack: warning: edited or new but not named, so packed as HEAD has them: ${left[*]}" >&2
fi
du -sh "$pack"
