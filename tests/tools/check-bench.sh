#!/usr/bin/env bash
# ember-bench: the markdown table and the llama-bench-shaped JSON that scripts read.
set -euo pipefail
# (A failed step names itself: a grep -q or a crash inside $(...) prints nothing of its own.)
trap 'echo "check-bench: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
bench=$1
model=$2
out=$("$bench" -m "$model" -p 16 -n 4 -r 2 -t 1 -o json)
python3 - "$out" <<'PY'
import json, sys
recs = json.loads(sys.argv[1])
assert isinstance(recs, list) and len(recs) == 2, recs
for key in ("model_filename", "model_type", "n_threads", "n_prompt", "n_gen", "avg_ts", "stddev_ts", "backends", "samples_ts"):
    assert all(key in r for r in recs), key
pp, tg = recs
assert pp["n_prompt"] == 16 and pp["n_gen"] == 0 and tg["n_prompt"] == 0 and tg["n_gen"] == 4
assert all(r["avg_ts"] > 0 and len(r["samples_ts"]) == 2 and r["n_threads"] == 1 for r in recs)
PY
md=$("$bench" -m "$model" -p 8 -n 2 -r 1)
grep -q "| pp8 |" <<<"$md"
grep -q "| tg2 |" <<<"$md"
# -d (llama-bench's --n-depth): every test after N cached tokens; the context must hold them
out=$("$bench" -m "$model" -p 8 -n 4 -d 0,40 -r 1 -t 1 -o json)
python3 - "$out" <<'PY'
import json, sys
recs = json.loads(sys.argv[1])
assert [(r["n_prompt"], r["n_gen"], r["n_depth"]) for r in recs] == [(8, 0, 0), (0, 4, 0), (8, 0, 40), (0, 4, 40)], recs
assert all(r["avg_ts"] > 0 for r in recs)
PY
md=$("$bench" -m "$model" -p 8 -n 2 -d 300 -r 1 -t 1)
grep -q "| pp8 @ d300 |" <<<"$md"
grep -q "| tg2 @ d300 |" <<<"$md"
# --device-top-k: decode reads only the token id; the JSON and the test name say so
out=$("$bench" -m "$model" -p 0 -n 4 -r 1 -t 1 --device-top-k 1 -o json)
python3 - "$out" <<'PY'
import json, sys
recs = json.loads(sys.argv[1])
assert len(recs) == 1 and recs[0]["device_top_k"] == 1 and recs[0]["avg_ts"] > 0, recs
PY
# (the output taken whole first: grep -q at the end of a pipe stops reading at its match, and a
# writer still printing then dies of SIGPIPE, which pipefail makes this script's failure)
md=$("$bench" -m "$model" -p 0 -n 2 -r 1 -t 1 --device-top-k 1)
grep -q "| tg2 top-k1 |" <<<"$md"
# the device: named and described; --device-bw measures its copy bandwidth (here the CPU's)
out=$("$bench" -m "$model" -p 0 -n 2 -r 1 -t 1 --device cpu --device-bw 64 -o json)
python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])[0]
assert r["device"] == "cpu" and r["device_description"] and r["device_bandwidth_gbs"] > 0, r
PY
md=$("$bench" -m "$model" -p 0 -n 2 -r 1 -t 1 --device cpu --device-bw 64)
grep -q "^device: cpu (.*), copy bandwidth [0-9]* GB/s" <<<"$md"
grep -q "% of bw) |" <<<"$md"
"$bench" -m "$model" -p 0 -n 2 -r 1 -t 1 --device cpu -o json | python3 -c "import json,sys; assert json.load(sys.stdin)[0]['device_bandwidth_gbs'] == 0"
if "$bench" -m "$model" --device-bw -3 2>/dev/null; then echo "a bad --device-bw must fail"; exit 1; fi
if "$bench" -m "$model" --device-top-k x 2>/dev/null; then echo "a bad --device-top-k must fail"; exit 1; fi
if "$bench" -m "$model" -d x 2>/dev/null; then echo "a bad -d must fail"; exit 1; fi
if "$bench" -m /nonexistent.gguf 2>/dev/null; then echo "a missing model must fail"; exit 1; fi
if "$bench" -m "$model" -p x 2>/dev/null; then echo "a bad -p must fail"; exit 1; fi
echo "ember-bench check passed"
