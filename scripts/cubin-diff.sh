#!/usr/bin/env bash
# Which kernels an edit changes, without a GPU: compiles one CUDA source of the tree to an sm_90
# (sm_90a for the wgmma file) cubin as it is and as it was at REV (default HEAD), then compares each kernel's machine code
# (its .text section) and prints "same", "changed" (with both sizes), "new" or "gone" per kernel.
# Before a device call: an edit meant for one kernel that changes others has to be measured on
# those too, and one whose kernel comes out byte-identical needs no measurement there.
#
#     scripts/cubin-diff.sh backends/cuda/ops-matvec-ext.cu [REV] [| grep -v same]
#
# Needs a configured CUDA build directory (EMBER_BUILD_DIR, default /tmp/b-cu: cmake -G Ninja
# -DEMBER_CUDA=ON -DEMBER_CUDA_ARCHS=90 ...): its compile command for the file is reused with
# -cubin. REV's tree (backends/, include/, runtime/, quant/) is taken from git, so edited headers
# count too; a kernel that gained or lost a trailing template argument at its default (", false>",
# 0, 1) is compared under its name without it. EMBER_CUBIN_KEEP=1 keeps both cubins (their folder is printed).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
src=${1:?usage: scripts/cubin-diff.sh FILE.cu [REV]}
rev=${2:-HEAD}
build=${EMBER_BUILD_DIR:-/tmp/b-cu}
[ -f "$build/build.ninja" ] || { echo "cubin-diff: no ninja build in $build (EMBER_BUILD_DIR)" >&2; exit 1; }
cmd=$(ninja -C "$build" -t commands | grep -F -- "$root/$src" | grep -- " -c " | tail -1) ||
    { echo "cubin-diff: $build has no compile command for $src" >&2; exit 1; }
# The compiler and its flags, one sm_90 cubin instead of the object (no ccache, no depfile); sm_90a
# where the file is built for it (ops-matmul-wgmma.cu: at sm_90 its wgmma kernels compile to empty
# bodies, the same on both sides whatever the edit)
arch=sm_90
grep -q 'compute_90a' <<<"$cmd" && arch=sm_90a
cmd=$(sed -E 's/^.*ccache //; s/ -MD -MT [^ ]* -MF [^ ]*//; s/ -o [^ ]*\.o/ -o OUTFILE/;
              s/--generate-code=arch=compute_[0-9a-z]+,code=\[[^]]*\]/ /g; s/ -c / -arch='"$arch"' -cubin /' <<<"$cmd")
tmp=$(mktemp -d)
[ -n "${EMBER_CUBIN_KEEP:-}" ] && echo "cubins in $tmp" >&2 || trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/old"
git archive "$rev" -- backends include runtime quant | tar -x -C "$tmp/old"
(cd "$build" && eval "${cmd//OUTFILE/$tmp/new.cubin}") >"$tmp/new.log" 2>&1 || { cat "$tmp/new.log" >&2; exit 1; }
old_cmd=${cmd//$root\//$tmp/old/}
(cd "$build" && eval "${old_cmd//OUTFILE/$tmp/old.cubin}") >"$tmp/old.log" 2>&1 || { cat "$tmp/old.log" >&2; exit 1; }
python3 - "$tmp/old.cubin" "$tmp/new.cubin" "$rev" <<'EOF'
import re, shutil, subprocess, sys

def kernels(path):
    """Each kernel's .text section bytes, by mangled name (the ELF section headers, via readelf)."""
    data = open(path, "rb").read()
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
    res = {}
    for line in out.splitlines():
        m = re.search(r"\]\s+\.text\.(\S+)\s+\S+\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m:
            off, size = int(m.group(2), 16), int(m.group(3), 16)
            res[m.group(1)] = data[off:off + size]
    return res

def demangled(ks):
    """Keyed by the demangled name without namespaces: an anonymous namespace's mangled name
    carries a hash of the file's path, which differs between the two trees."""
    names = list(ks)
    if shutil.which("c++filt"):
        dem = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
        names = [d or n for n, d in zip(names, dem)]
    return {n.replace("(anonymous namespace)::", ""): v for n, v in zip(names, ks.values())}

old, new = demangled(kernels(sys.argv[1])), demangled(kernels(sys.argv[2]))
# A kernel that gained a trailing template argument at its default (", false>" / ", 0>" / ", 1>") is the
# same kernel under a new name: compared under its old one; one that lost such an argument, too.
for n in [n for n in new if n not in old]:
    m = re.sub(r", (false|0|1)>\(", ">(", n, count=1)
    if m != n and m in old and m not in new:
        new[m] = new.pop(n)
for n in [n for n in old if n not in new]:
    m = re.sub(r", (false|0|1)>\(", ">(", n, count=1)
    if m != n and m in new and m not in old:
        old[m] = old.pop(n)
names = sorted(set(old) | set(new))
counts = {}
for n in names:
    a, b = old.get(n), new.get(n)
    state = "new" if a is None else "gone" if b is None else "same" if a == b else "changed"
    counts[state] = counts.get(state, 0) + 1
    sizes = f" ({len(a)} -> {len(b)} bytes)" if state == "changed" else ""
    print(f"{state:8} {n}{sizes}")
print(f"# against {sys.argv[3]}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
EOF
