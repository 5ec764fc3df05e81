"""Context: eval, logits, greedy generation against the reference, streaming, stop strings,
sampling, chat."""

import pytest

import ember
import ember.context
from conftest import PROMPT_TEXT


def test_eval_and_logits_match_the_greedy_reference(ctx, model, reference):
    prompt, greedy = reference
    ctx.eval(prompt)
    assert ctx.tokens == prompt
    assert ctx.kv_used == len(prompt)
    logits = ctx.logits
    np = pytest.importorskip("numpy")
    assert isinstance(logits, np.ndarray) and logits.shape == (model.n_vocab,) and logits.dtype == np.float32
    assert int(logits.argmax()) == greedy[0]
    assert np.isfinite(logits).all()
    ctx.eval([greedy[0]])
    assert int(ctx.logits.argmax()) == greedy[1]
    assert logits is not ctx.logits  # a copy that stays valid


def test_logits_without_numpy(ctx, reference, monkeypatch):
    prompt, greedy = reference
    ctx.eval(prompt)
    monkeypatch.setattr(ember.context, "_np", None)
    logits = ctx.logits
    assert isinstance(logits, list) and len(logits) == 32000
    assert max(range(len(logits)), key=logits.__getitem__) == greedy[0]


def test_greedy_generation_reproduces_the_reference(ctx, model, reference):
    prompt, greedy = reference
    g = ctx.generate(PROMPT_TEXT, max_tokens=len(greedy), temperature=0)
    pieces = list(g)
    assert g.tokens == greedy
    assert g.finish_reason == "length"
    assert "".join(pieces) == g.text == model.detokenize(greedy)
    assert g.text.startswith(", I will bring")
    assert len(pieces) > 10 and all(isinstance(p, str) and p for p in pieces)
    # the last token is not evaluated; everything before it is in the cache
    assert ctx.tokens == prompt + greedy[:-1]


def test_generation_streams(ctx, reference):
    prompt, greedy = reference
    g = ctx.generate(prompt, max_tokens=20, temperature=0)
    first = next(g)
    assert first == ","
    assert g.tokens == greedy[:1] and g.finish_reason is None  # one token at a time, not all first
    rest = list(g)
    assert len(g.tokens) == 20 and first + "".join(rest) == g.text


def test_stop_strings(ctx, reference):
    # greedy text: ", I will bring the people unto thee, and will bring them into the land of Egypt, ..."
    g = ctx.generate(PROMPT_TEXT, max_tokens=32, temperature=0, stop=["Egypt", "nowhere"])
    assert g.read() == ", I will bring the people unto thee, and will bring them into the land of "
    assert g.finish_reason == "stop"
    g = ctx.generate(PROMPT_TEXT, max_tokens=32, temperature=0, stop="unto thee")
    assert g.read() == ", I will bring the people "
    # a stop string that never comes: all text, nothing held back
    g = ctx.generate(PROMPT_TEXT, max_tokens=8, temperature=0, stop=["Pharaoh's chariot"])
    assert g.read() == ctx.model.detokenize(reference[1][:8]) and g.finish_reason == "length"


def test_cut_at_stop_holds_back_partial_matches():
    cut = ember.context._cut_at_stop
    assert cut("abc Eg", ["Egypt"], final=False) == ("abc ", "Eg", False)
    assert cut("abc Egypt!", ["Egypt"], final=False) == ("abc ", "", True)
    assert cut("abc Eg", ["Egypt"], final=True) == ("abc Eg", "", False)
    assert cut("xyz", ["Egypt", "z!"], final=False) == ("xy", "z", False)
    assert cut("a\n\nb", ["\n\n", "b"], final=False) == ("a", "", True)


def test_end_of_generation_and_zero_tokens(ctx, model):
    g = ctx.generate(PROMPT_TEXT, max_tokens=10, temperature=0, logit_bias={model.token_eos: 100.0})
    assert g.read() == "" and g.tokens == [] and g.finish_reason == "eog"
    g = ctx.generate(PROMPT_TEXT, max_tokens=0)
    assert g.read() == "" and g.finish_reason == "length"
    # a banned token never comes
    banned = model.tokenize(" will", add_special=False)[0]
    g = ctx.generate(PROMPT_TEXT, max_tokens=12, temperature=0, logit_bias={banned: float("-inf")})
    g.read()
    assert banned not in g.tokens


def test_context_full_ends_generation(model, reference):
    prompt, greedy = reference
    with ember.Context(model, n_ctx=16, kv_type="f32") as c:
        g = c.generate(prompt, max_tokens=100, temperature=0)
        g.read()
        assert g.finish_reason == "context_full"
        assert g.tokens == greedy[:len(g.tokens)] and 6 <= len(g.tokens) <= 7
        assert c.kv_used == 16


def test_seeded_sampling_is_reproducible(ctx):
    a = ctx.generate("In the beginning", max_tokens=24, temperature=1.0, seed=42)
    a.read()
    b = ctx.generate("In the beginning", max_tokens=24, temperature=1.0, seed=42)
    b.read()
    assert a.tokens == b.tokens and a.text == b.text
    others = []
    for seed in (1, 2, 3):
        g = ctx.generate("In the beginning", max_tokens=24, temperature=1.0, seed=seed, top_k=0, top_p=1.0, min_p=0.0)
        g.read()
        others.append(g.tokens)
    assert any(t != a.tokens for t in others)
    g = ctx.generate("In the beginning", max_tokens=24, temperature=0.8, seed=7, repeat_penalty=1.3)
    assert len(g.read()) > 0 and len(g.tokens) == 24


def test_prompt_prefix_is_reused(ctx, model, reference):
    prompt, greedy = reference
    g = ctx.generate(prompt, max_tokens=8, temperature=0)
    g.read()
    evaluated = []
    real_eval = ctx.eval
    ctx.eval = lambda toks: (evaluated.append(list(toks)), real_eval(toks))[1]
    # continue from where the first generation stopped: only the new tokens are evaluated
    g2 = ctx.generate(prompt + greedy[:8], max_tokens=8, temperature=0)
    assert evaluated[0] == [greedy[7]]
    g2.read()
    assert g2.tokens == greedy[8:16]
    # a different prompt drops what no longer matches
    evaluated.clear()
    g3 = ctx.generate(prompt[:5] + [model.tokenize(" Adam", add_special=False)[0]], max_tokens=1, temperature=0)
    g3.read()
    assert len(evaluated[0]) == 1 and ctx.tokens == prompt[:5] + evaluated[0]


def test_a_new_generation_ends_the_previous_one(ctx):
    g1 = ctx.generate("And God said", max_tokens=50, temperature=0)
    next(g1)
    g2 = ctx.generate("In the beginning", max_tokens=3, temperature=0)
    assert list(g1) == []  # closed: it would read the other prompt's logits
    assert len(g2.read()) > 0


def test_chat_uses_the_template(ctx, reference):
    # the bundled template renders a lone user message as the passage itself, so a greedy chat
    # answer is the reference continuation
    g = ctx.chat([{"role": "user", "content": PROMPT_TEXT}], max_tokens=16, temperature=0)
    g.read()
    assert ctx.tokens[:10] == reference[0]
    assert g.tokens == reference[1][:16]
    g = ctx.chat([("user", PROMPT_TEXT)], max_tokens=4, temperature=0,
                 template="{% for m in messages %}{{ bos_token }}{{ m.content }}{% endfor %}")
    g.read()
    assert ctx.tokens[:10] == reference[0]  # the template wrote <s>: not added twice


def test_sampler_object(ctx, model, reference):
    prompt, greedy = reference
    ctx.eval(prompt)
    with ember.Sampler(temperature=0) as s:
        assert s.sample(ctx) == greedy[0]
        assert s.sample_logits(ctx.logits) == greedy[0]
        assert s.sample_logits(list(ctx.logits)) == greedy[0]
        s.accept(5)
        s.reset()
    with ember.Sampler(temperature=0.9, seed=5) as a, ember.Sampler(temperature=0.9, seed=5) as b:
        assert [a.sample(ctx) for _ in range(5)] == [b.sample(ctx) for _ in range(5)]


def test_token_stream_holds_back_partial_utf8(model):
    # "☃" is three byte-fallback tokens (after SentencePiece's leading space, left out here)
    toks = [t for t in model.tokenize("☃", add_special=False) if model.token_to_piece(t) != b" "]
    assert len(toks) == 3
    with ember.TokenStream(model) as ts:
        assert [ts.push(t) for t in toks] == ["", "", "☃"]
        assert ts.push(toks[0]) == "" and ts.flush() == "\ufffd"  # an incomplete sequence at the end


def test_context_properties(model):
    with ember.Context(model, n_ctx=64, n_batch=32, n_threads=1) as c:
        assert c.n_ctx == 64 and c.n_batch == 32 and c.n_threads == 1
        c.n_threads = 2
        assert c.n_threads == 2
        c.eval([1, 2, 3])
        c.truncate(1)
        assert c.tokens == [1] and c.kv_used == 1
        c.reset()
        assert c.tokens == [] and c.kv_used == 0
        c.eval(list(range(5, 45)))  # more than n_batch: split in two
        assert c.kv_used == 40
