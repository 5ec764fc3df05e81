#!/usr/bin/env bash
# ember-tokenize: every text of every vocab fixture through the tool gives the reference ids.
set -euo pipefail
tool=$1
dir=$2
[ -d "$dir" ] || { echo "no vocab fixtures in $dir: skipped"; exit 0; }
python3 - "$tool" "$dir" <<'PY'
import glob, os, subprocess, sys, tempfile
tool, d = sys.argv[1], sys.argv[2]
n = 0
for gguf in sorted(glob.glob(os.path.join(d, "*.gguf"))):
    texts = open(gguf + ".inp", "rb").read().split(b"\n__ggml_vocab_test__\n")[:-1]
    lines = open(gguf + ".out", encoding="utf-8").read().split("\n")
    with tempfile.NamedTemporaryFile() as f:
        for text, want in zip(texts, lines):
            f.seek(0); f.truncate(); f.write(text); f.flush()
            got = subprocess.run([tool, "-m", gguf, "--vocab-only", "--file", f.name, "--no-bos", "--ids"],
                                 capture_output=True, check=True).stdout.decode().split()
            assert got == want.split(), "%s: %r\n got  %s\n want %s" % (os.path.basename(gguf), text, got, want)
            n += 1
assert n >= 200, n
print("ember-tokenize check passed (%d texts)" % n)
PY
if "$tool" -m /nonexistent.gguf --prompt hi --ids 2>/dev/null; then echo "missing model accepted"; exit 1; fi
