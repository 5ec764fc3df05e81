#!/usr/bin/env python3
"""generate.py: stream text from a model with the Python bindings (bindings/python).

    pip install --no-build-isolation --no-index ./bindings/python   # or run from the checkout
    python3 examples/generate.py "And God said unto Moses," -n 64 --temp 0.7 --seed 1

The library is found from EMBER_LIBRARY, else this checkout's build/lib/, else an installed copy.
--stats prints the decode speed (generated tokens per second, prompt excluded) to stderr."""

import argparse
import os
import sys
import time

try:
    import ember
except ImportError:  # not installed: use the bindings of this checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bindings", "python"))
    import ember

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT_MODEL = os.path.join(REPO, "models", "ember-kjv-25m-q8_0.gguf")
# Run from a checkout with the package installed elsewhere: use the checkout's library.
if "EMBER_LIBRARY" not in os.environ and os.path.exists(os.path.join(REPO, "build", "lib", "libember.so")):
    os.environ["EMBER_LIBRARY"] = os.path.abspath(os.path.join(REPO, "build", "lib", "libember.so"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", default="And God said unto Moses,")
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL)
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--temp", type=float, default=0.8, help="0 = greedy")
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--min-p", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--stop", action="append", default=[], help="stop before this text (repeatable)")
    ap.add_argument("-t", "--threads", type=int, default=0, help="0 = all cores")
    ap.add_argument("-c", "--ctx-size", type=int, default=0, help="0 = the model's trained context")
    ap.add_argument("--ignore-eos", action="store_true", help="never stop at an end-of-text token")
    ap.add_argument("--stats", action="store_true")
    args = ap.parse_args()

    try:
        with ember.Model(args.model) as model, ember.Context(model, n_ctx=args.ctx_size, n_threads=args.threads) as ctx:
            bias = {t: float("-inf") for t in (model.token_eos, model.token_eot) if t >= 0} if args.ignore_eos else None
            gen = ctx.generate(args.prompt, max_tokens=args.max_tokens, temperature=args.temp, top_k=args.top_k,
                               top_p=args.top_p, min_p=args.min_p, seed=args.seed, stop=args.stop, logit_bias=bias)
            t0 = time.perf_counter()  # the prompt is evaluated: from here on it is decode
            print(args.prompt, end="", flush=True)
            for piece in gen:
                print(piece, end="", flush=True)
            dt = time.perf_counter() - t0
            print()
            if args.stats:
                n = len(gen.tokens)
                print(f"generate.py: {n} tokens in {dt:.3f} s: {n / dt if dt > 0 else 0:.1f} tokens/s "
                      f"({ctx.n_threads} threads, finish: {gen.finish_reason})", file=sys.stderr)
    except ember.Error as e:
        print(f"generate.py: {e}" + (f" (status {e.status})" if e.status is not None else ""), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
