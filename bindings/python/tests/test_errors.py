"""Every error path: each status becomes its ember.Error subclass with the status code and the
library's ember_last_error() message; failures leave objects usable."""

import ctypes
import os
import subprocess
import sys

import pytest

import ember
import ember._lib as L
from ember.errors import error_class, raise_status
from conftest import HERE, MODEL


def test_status_classes():
    classes = {1: ember.InvalidArgumentError, 2: ember.OutOfMemoryError, 3: ember.FileIOError,
               4: ember.BadFormatError, 5: ember.UnsupportedError, 6: ember.BackendError,
               7: ember.ContextFullError, 8: ember.CancelledError, 9: ember.InternalError}
    for status, cls in classes.items():
        assert error_class(status) is cls
        with pytest.raises(cls) as e:
            raise_status(status, "why")
        assert isinstance(e.value, ember.Error)
        assert e.value.status == status and e.value.message == "why" and str(e.value) == "why"
        # the library agrees on what the code means
        name = ember.status_str(status)
        assert name.startswith("EMBER_ERR_")
    with pytest.raises(ember.Error) as e:
        raise_status(42, "")  # a code newer than the bindings
    assert type(e.value) is ember.Error and e.value.status == 42
    assert issubclass(ember.InvalidArgumentError, ValueError)
    assert issubclass(ember.LibraryNotFoundError, OSError)


def test_missing_file():
    with pytest.raises(ember.FileIOError) as e:
        ember.Model("/nonexistent/model.gguf")
    assert e.value.status == 3 and "/nonexistent/model.gguf" in e.value.message


def test_bad_format(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(ember.BadFormatError) as e:
        ember.Model(bad)
    assert e.value.status == 4 and e.value.message
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(ember.BadFormatError):
        ember.Model(bad)


def test_unknown_devices():
    with pytest.raises(ember.InvalidArgumentError) as e:
        ember.Model(MODEL, device="no-such-device")
    assert "no-such-device" in e.value.message
    if "vulkan:7" not in ember.devices():
        with pytest.raises(ember.Error) as e:
            ember.Model(MODEL, device="vulkan:7")
        assert e.value.status in (1, 5)


def test_cancelled_load():
    with pytest.raises(ember.CancelledError) as e:
        ember.Model(MODEL, progress=lambda p: p > 0.3)
    assert e.value.status == 8 and "cancel" in e.value.message


def test_progress_callback_exception_propagates():
    def boom(p):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        ember.Model(MODEL, progress=boom)


def test_bad_context_params(model):
    with pytest.raises(ember.InvalidArgumentError) as e:
        ember.Context(model, kv_type="no-such-type")
    assert "no-such-type" in e.value.message
    with pytest.raises(ember.InvalidArgumentError) as e:
        ember.Context(model, kv_type="q4_k")  # a known type the cache does not take: the library says so
    assert "q4_k" in e.value.message and e.value.message == L.lib().last_error_str()
    with pytest.raises(ember.InvalidArgumentError):
        ember.Context(model, n_threads=-5)


def test_bad_tokens_change_nothing(ctx, model):
    ctx.eval([1, 2, 3])
    with pytest.raises(ember.InvalidArgumentError) as e:
        ctx.eval([5, model.n_vocab])
    assert e.value.status == 1 and str(model.n_vocab) in e.value.message
    with pytest.raises(ember.InvalidArgumentError):
        ctx.eval([-1])
    with pytest.raises(ember.InvalidArgumentError):
        ctx.eval([])
    with pytest.raises(ember.InvalidArgumentError):
        ctx.eval([2**32 + 5])  # not silently token 5
    for call in (lambda: model.is_eog(2**32 + 2), lambda: model.token_to_piece(2**32 + 5),
                 lambda: model.detokenize([2**32 + 5])):
        with pytest.raises(ember.InvalidArgumentError, match="32-bit"):
            call()
    assert ctx.tokens == [1, 2, 3] and ctx.kv_used == 3
    ctx.eval([4])  # still usable
    for call in (lambda: model.token_to_piece(-5), lambda: model.token_to_piece(model.n_vocab),
                 lambda: model.detokenize([40000])):
        with pytest.raises(ember.InvalidArgumentError) as e:
            call()
        assert "out of range" in e.value.message


def test_context_full_changes_nothing(model):
    with ember.Context(model, n_ctx=16) as c:
        c.eval(range(10, 20))
        with pytest.raises(ember.ContextFullError) as e:
            c.eval(range(20, 30))
        assert e.value.status == 7 and "16" in e.value.message
        assert c.kv_used == 10 and len(c.tokens) == 10
        c.eval(range(20, 26))
        assert c.kv_used == 16
        with pytest.raises(ember.ContextFullError):
            c.generate([1, 2, 3] + list(range(100, 120)))  # the prompt alone does not fit


def test_abort_callback_cancels_eval(model):
    calls = []
    with ember.Context(model, n_ctx=64, n_ubatch=4, abort=lambda: calls.append(1) or len(calls) > 1) as c:
        with pytest.raises(ember.CancelledError) as e:
            c.eval(list(range(1, 13)))
        assert e.value.status == 8
        assert c.kv_used < 12  # it stopped part way


def test_logits_before_eval(model):
    with ember.Context(model, n_ctx=16) as c:
        with pytest.raises(ember.InvalidArgumentError):
            c.logits


def test_chat_template_errors(model):
    with pytest.raises(ember.InvalidArgumentError) as e:
        model.apply_chat_template([("user", "x")], template="{{ raise_exception('no system role') }}")
    assert e.value.message == "no system role"
    with pytest.raises(ember.InvalidArgumentError) as e:
        model.apply_chat_template([("user", "x")], template="{% for %}")
    assert "line 1" in e.value.message


def test_sampler_errors(ctx):
    for kwargs in ({"temperature": float("nan")}, {"top_p": 2.0}, {"min_p": -1.0}, {"seed": -1},
                   {"seed": 2**32}, {"repeat_penalty": -1.0}, {"logit_bias": {0: 1.0}},
                   {"logit_bias": {99999: 1.0}, "n_vocab": 32000}, {"logit_bias": {5: float("nan")}, "n_vocab": 32000}):
        with pytest.raises(ember.InvalidArgumentError):
            ember.Sampler(**kwargs)
    with pytest.raises(ember.InvalidArgumentError):
        ctx.generate("x", top_p=5.0)
    with ember.Sampler(temperature=0) as s:
        with pytest.raises(ember.InvalidArgumentError):
            s.sample(ctx)  # nothing evaluated yet: no logits
        with pytest.raises(ember.InvalidArgumentError):
            s.sample_logits([float("nan")] * 4)
        with pytest.raises(ember.InvalidArgumentError):
            s.sample_logits([float("-inf")] * 4)  # no token left
        with pytest.raises(ember.InvalidArgumentError):
            s.accept(-3)
    with pytest.raises(ember.InvalidArgumentError):
        s.sample_logits([1.0])  # closed


def test_closed_objects(model):
    c = ember.Context(model, n_ctx=16)
    c.close()
    for call in (lambda: c.eval([1]), lambda: c.logits, lambda: c.generate("x"), lambda: c.n_ctx, c.reset):
        with pytest.raises(ember.InvalidArgumentError, match="closed"):
            call()
    ts = ember.TokenStream(model)
    ts.close()
    with pytest.raises(ember.InvalidArgumentError, match="closed"):
        ts.push(1)


def test_abi_mismatch_is_refused(monkeypatch):
    lib = L.lib()
    assert lib.abi_version() == ember.ABI_VERSION == 1
    monkeypatch.setattr(L, "ABI_VERSION", 2)
    with pytest.raises(ember.UnsupportedError) as e:
        L._Lib(lib.cdll, lib.path)
    assert e.value.status == 5 and e.value.message


def test_library_not_found_lists_every_place(monkeypatch, tmp_path):
    monkeypatch.delenv("EMBER_LIBRARY", raising=False)
    monkeypatch.setattr(L, "_candidates", lambda: [("build tree", str(tmp_path / "build/lib/libember.so")),
                                                    ("dynamic loader", "libember-does-not-exist.so.9")])
    with pytest.raises(ember.LibraryNotFoundError) as e:
        L.find_and_open()
    msg = e.value.message
    assert "EMBER_LIBRARY: not set" in msg
    assert str(tmp_path / "build/lib/libember.so") + " (no such file)" in msg
    assert "libember-does-not-exist.so.9" in msg
    assert "cmake --install" in msg


def _import_with(env_value):
    env = dict(os.environ, EMBER_LIBRARY=env_value, PYTHONPATH=str(HERE.parent))
    code = ("import ember\n"
            "try:\n    ember.Model('x')\n"
            "except ember.LibraryNotFoundError as e:\n    print('NOTFOUND', e)\n")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_bad_ember_library_setting(tmp_path):
    r = _import_with(str(tmp_path / "nope.so"))
    assert r.returncode == 0, r.stderr
    assert "NOTFOUND" in r.stdout and str(tmp_path / "nope.so") in r.stdout and "no such file" in r.stdout
    junk = tmp_path / "libember.so"
    junk.write_text("not a shared library")
    r = _import_with(str(tmp_path))  # a directory: libember is looked for inside
    assert "NOTFOUND" in r.stdout and str(junk) in r.stdout
    # a library that is not libember
    libc = ctypes.util.find_library("c")
    if libc:
        r = _import_with(libc)
        assert "NOTFOUND" in r.stdout and "not libember" in r.stdout
