"""One model shared by several threads, one context per thread."""

import threading

import ember


def test_contexts_on_several_threads(model, reference):
    prompt, greedy = reference
    results, errors = {}, []

    def work(i):
        try:
            with ember.Context(model, n_ctx=64, kv_type="f32", n_threads=1) as c:
                for _ in range(2):
                    g = c.generate(prompt, max_tokens=16, temperature=0)
                    g.read()
                    results.setdefault(i, []).append(g.tokens)
                try:
                    c.eval([model.n_vocab])  # errors are per thread: this message is this thread's
                except ember.InvalidArgumentError as e:
                    results[i].append(e.message)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(results) == [0, 1, 2, 3]
    for r in results.values():
        assert r[0] == greedy[:16] and r[1] == greedy[:16]
        assert "32000" in r[2]
