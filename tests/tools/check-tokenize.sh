#!/usr/bin/env bash
# ember-tokenize: every text of every vocab fixture through the tool gives the reference ids
# (each fixture's texts in one run with --separator, the model loaded once; its first two texts
# also one run each, from --file and from --prompt).
set -euo pipefail
tool=$1
dir=$2
[ -d "$dir" ] || { echo "no vocab fixtures in $dir: skipped"; exit 0; }
python3 - "$tool" "$dir" <<'PY'
import glob, os, subprocess, sys, tempfile
tool, d = sys.argv[1], sys.argv[2]
sep = b"\n__ggml_vocab_test__\n"
n = single = 0
for gguf in sorted(glob.glob(os.path.join(d, "*.gguf"))):
    raw = open(gguf + ".inp", "rb").read()
    texts = raw.split(sep)[:-1]
    wants = open(gguf + ".out", encoding="utf-8").read().split("\n")[:len(texts)]
    assert len(wants) == len(texts), gguf
    name = os.path.basename(gguf)
    base = [tool, "-m", gguf, "--vocab-only", "--no-bos", "--ids"]
    # All texts in one run: one line of ids per text.
    out = subprocess.run(base + ["--file", gguf + ".inp", "--separator", sep.decode()],
                         capture_output=True, check=True).stdout.decode().split("\n")
    assert out[-1] == "" and len(out) == len(texts) + 1, "%s: %d lines for %d texts" % (name, len(out) - 1, len(texts))
    for text, want, got in zip(texts, wants, out):
        assert got.split() == want.split(), "%s: %r\n got  %s\n want %s" % (name, text, got, want)
        n += 1
    # The first texts one run each: the whole file is the text.
    with tempfile.NamedTemporaryFile() as f:
        for text, want in list(zip(texts, wants))[:2]:
            f.seek(0); f.truncate(); f.write(text); f.flush()
            got = subprocess.run(base + ["--file", f.name], capture_output=True, check=True).stdout.decode().split()
            assert got == want.split(), "%s (--file): %r\n got  %s\n want %s" % (name, text, got, want)
            if b"\0" not in text and text:
                got = subprocess.run(base + ["--prompt", text], capture_output=True, check=True).stdout.decode().split()
                assert got == want.split(), "%s (--prompt): %r\n got  %s\n want %s" % (name, text, got, want)
            single += 1
    # A last text without a separator after it counts too; an empty text is an empty line.
    out = subprocess.run(base + ["--file", "/dev/stdin", "--separator", "|"], input=b"|" + texts[1],
                         capture_output=True, check=True).stdout.decode().split("\n")
    assert len(out) == 3 and out[0] == "" and out[1].split() == wants[1].split() and out[2] == "", "%s: %r" % (name, out)
assert n >= 200, n
print("ember-tokenize check passed (%d texts in one run per vocab, %d one run each)" % (n, single))
PY
if "$tool" -m /nonexistent.gguf --prompt hi --ids 2>/dev/null; then echo "missing model accepted"; exit 1; fi
