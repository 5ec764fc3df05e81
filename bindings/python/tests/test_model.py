"""Model: loading, metadata, tokenizer, chat template, lifetime."""

import gc
import weakref

import pytest

import ember
from conftest import MODEL, PROMPT_TEXT


def test_library_and_version():
    assert ember.library_path()
    assert ember.version() == ember.__version__
    assert ember.devices()[0] == "cpu"
    assert len(ember.device_descriptions()) == len(ember.devices()) and ember.device_descriptions()[0]
    assert ember.device_bandwidth(0, 8) > 0
    with pytest.raises(ember.InvalidArgumentError):
        ember.device_bandwidth(len(ember.devices()), 8)
    assert ember.status_str(3).startswith("EMBER_ERR_IO")


def test_metadata(model):
    # the values of ../shared/models/README.md
    assert model.arch == "llama"
    assert (model.n_vocab, model.n_layer, model.n_embd, model.n_head, model.n_head_kv, model.n_ctx_train) == \
        (32000, 8, 384, 6, 2, 512)
    assert 24_000_000 < model.n_params < 26_000_000
    assert model.file_size == MODEL.stat().st_size
    assert 0 < model.size < model.file_size
    assert model.n_tensors > 8
    assert (model.token_bos, model.token_eos) == (1, 2)
    assert model.add_bos
    assert model.description.startswith("llama")
    assert model.meta("general.architecture") == "llama"
    assert model.meta("llama.block_count") == "8"
    assert model.meta("no.such.key") is None
    assert model.meta("no.such.key", "x") == "x"
    md = model.metadata
    assert md["general.architecture"] == "llama"
    assert len(md) > 10
    assert "ember-kjv-25m" in repr(model)


def test_tokenize_detokenize(model, reference):
    prompt, _ = reference
    assert model.tokenize(PROMPT_TEXT) == prompt
    assert model.tokenize(PROMPT_TEXT, add_special=False) == prompt[1:]
    assert model.tokenize(PROMPT_TEXT.encode()) == prompt
    assert model.detokenize(prompt, remove_special=True) == PROMPT_TEXT
    assert model.tokenize("<s>x", add_special=False, parse_special=True)[0] == model.token_bos
    assert model.tokenize("<s>x", add_special=False)[0] != model.token_bos
    assert model.tokenize("") == [model.token_bos]
    long = "In the beginning God created the heaven and the earth. " * 200
    toks = model.tokenize(long, add_special=False)
    assert len(toks) > 1000
    assert model.detokenize(toks) == long
    assert model.token_to_piece(prompt[1]) == b" And"
    assert model.token_to_piece(model.token_bos) == b""
    assert model.token_to_piece(model.token_bos, special=True) == b"<s>"
    assert model.is_eog(model.token_eos) and not model.is_eog(prompt[1])
    # multi-byte text survives the round trip
    assert model.detokenize(model.tokenize("Mosè — ☃", add_special=False)) == "Mosè — ☃"


def test_chat_template(model):
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
    # models/ember-kjv-25m.chat-template.jinja: passages separated by blank lines
    assert model.apply_chat_template(msgs) == "S\n\nUA\n\n"
    assert model.apply_chat_template([("user", "hi")]) == "hi"
    tmpl = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    assert model.apply_chat_template(msgs[:2], template=tmpl) == "[system:S][user:U]>"
    assert model.apply_chat_template(msgs[:2], template=tmpl, add_generation_prompt=False) == "[system:S][user:U]"
    big = "x" * 10000  # longer than the first buffer
    assert model.apply_chat_template([("user", big)]) == big


def test_vocab_only_and_progress():
    seen = []
    with ember.Model(MODEL, vocab_only=True, progress=seen.append) as m:
        assert m.tokenize("And God said") == [1, 1126, 4177, 1497]
    assert seen and seen[-1] == 1.0
    assert all(a <= b for a, b in zip(seen, seen[1:]))
    with ember.Model(MODEL, use_mmap=False) as m:
        assert m.n_vocab == 32000


def test_close_is_deterministic_and_idempotent():
    m = ember.Model(MODEL, vocab_only=True)
    with m:
        assert not m.closed
    assert m.closed
    m.close()  # idempotent
    with pytest.raises(ember.InvalidArgumentError) as e:
        m.tokenize("x")
    assert e.value.status == 1 and "closed" in e.value.message
    with pytest.raises(ember.InvalidArgumentError):
        _ = m.n_vocab


def test_closing_a_model_closes_its_contexts():
    m = ember.Model(MODEL)
    c = ember.Context(m, n_ctx=32)
    m.close()  # the C model must outlive its contexts: they go first
    assert c.closed and m.closed
    with pytest.raises(ember.InvalidArgumentError):
        c.eval([1])


def _watch_free(obj, freed):
    real, name = obj._free, type(obj).__name__  # no reference to obj itself: no cycle

    def free(handle):
        freed.append(name)
        real(handle)

    obj._free = free


def test_garbage_collector_frees_everything():
    freed = []

    def make():
        m = ember.Model(MODEL)
        c = ember.Context(m, n_ctx=32)
        s = ember.Sampler(temperature=0.5, seed=3)
        for o in (m, c, s):
            _watch_free(o, freed)
        g = c.generate([1, 1126], max_tokens=2, temperature=0)
        next(g)
        return weakref.ref(m), weakref.ref(c), weakref.ref(g)

    refs = make()
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
    assert sorted(freed) == ["Context", "Model", "Sampler"]
    # the context went before its model
    assert freed.index("Context") < freed.index("Model")


def test_a_reference_cycle_cannot_free_the_model_before_its_context():
    # In a cycle the collector clears weak references and runs finalizers in any order; the
    # C model must still be freed after its contexts and streams.
    for _ in range(3):
        freed = []
        m = ember.Model(MODEL)
        c = ember.Context(m, n_ctx=32)
        ts = ember.TokenStream(m)
        for o in (m, c, ts):
            _watch_free(o, freed)
        m.cycle, c.cycle, ts.cycle = c, ts, m
        del m, c, ts, o
        gc.collect()
        assert sorted(freed) == ["Context", "Model", "TokenStream"]
        assert freed[-1] == "Model"
