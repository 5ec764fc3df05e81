#!/usr/bin/env bash
# ember-template: every case of every fixture template renders byte-exact through the tool.
set -euo pipefail
tool=$1
dir=$2
[ -d "$dir" ] || { echo "no template fixtures in $dir: skipped"; exit 0; }
n=0
for t in "$dir"/*.jinja; do
    cases=${t%.jinja}.cases.json
    out=$("$tool" --template "$t" --cases "$cases")
    python3 - "$cases" "$out" <<'PY'
import json, sys
cases = json.load(open(sys.argv[1], encoding="utf-8"))
got = json.loads(sys.argv[2])
assert len(got) == len(cases), (len(got), len(cases))
for c, g in zip(cases, got):
    assert g == c["expected"], "%s: case %s differs:\n%r\n%r" % (sys.argv[1], c["name"], g, c["expected"])
PY
    n=$((n + 1))
done
[ "$n" -ge 10 ] || { echo "expected the 10 fixture templates, found $n"; exit 1; }
# a broken template fails with a message naming the problem, never a crash
bad=$(mktemp)
trap 'rm -f "$bad"' EXIT
printf '{%% for m in messages %%}{{ m.content | nosuchfilter }}{%% endfor %%}' >"$bad"
if "$tool" --template "$bad" --cases "$(ls "$dir"/*.cases.json | head -n1)" 2>/dev/null; then echo "bad template accepted"; exit 1; fi
echo "ember-template check passed ($n templates)"
