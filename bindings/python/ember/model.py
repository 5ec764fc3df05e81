"""Model: a loaded GGUF file, its metadata, tokenizer and chat template."""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Callable, Iterable, Mapping, Sequence, Union

from . import _lib as L
from ._owned import Owned

Message = Union[Mapping[str, str], Sequence[str]]


def _text_call(fn, *args, initial: int = 256) -> bytes:
    """Calls an snprintf-style function (buf, size last) and returns the full text."""
    size = initial
    while True:
        buf = ctypes.create_string_buffer(size)
        n = fn(*args, buf, size)
        if n < 0:
            return None
        if n < size:
            return buf.raw[:n]
        size = n + 1


class Model(Owned):
    """A model loaded from a GGUF file. Immutable once loaded: one Model may be shared by any
    number of contexts and threads.

    n_gpu_layers: layers to offload (0 = CPU only, -1 = all); device: None for the best
    available, or a name such as "cpu", "cuda:0". progress: an optional callable taking a float
    in [0, 1]; returning True cancels the load (CancelledError). vocab_only loads the tokenizer
    and metadata only. Free with close(), a `with` block, or let the garbage collector do it."""

    _what = "model"

    def __init__(self, path: Union[str, os.PathLike], n_gpu_layers: int = 0, device: str | None = None, *,
                 use_mmap: bool = True, vocab_only: bool = False,
                 progress: Callable[[float], object] | None = None):
        lib = L.lib()
        self._handle = None  # None once closed
        self._c_handle = None  # the C model: freed when closed and no context or stream uses it
        self._users = 0
        self._users_lock = threading.Lock()
        self._contexts: "weakref.WeakSet" = weakref.WeakSet()
        self.path = os.fspath(path)
        params = lib.model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.device = device.encode() if device is not None else None
        params.use_mmap = 1 if use_mmap else 0
        params.vocab_only = 1 if vocab_only else 0
        callback_error: list[BaseException] = []
        if progress is not None:
            def on_progress(p, _user):
                try:
                    return 1 if progress(p) else 0
                except BaseException as e:  # an exception must not cross the C frames: cancel instead
                    callback_error.append(e)
                    return 1

            params.progress_callback = L.ProgressCallback(on_progress)
        handle = L.Model_p()
        status = lib.model_load(os.fsencode(self.path), ctypes.byref(params), ctypes.byref(handle))
        if callback_error:
            raise callback_error[0]
        L.check(status)
        self._handle = self._c_handle = handle
        self._free = lib.model_free

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Frees the model, closing its contexts first. Idempotent."""
        if self._handle is not None:
            for ctx in list(self._contexts):
                ctx.close()
            self._handle = None
            self._release(0)

    # Contexts and token streams hold the C model: it is freed after the last of them even when
    # the garbage collector finalizes a reference cycle in another order (it clears the weak
    # references of _contexts first).
    def _retain(self):
        with self._users_lock:
            handle = self.handle
            self._users += 1
            return handle

    def _release(self, n: int = 1) -> None:
        with self._users_lock:
            self._users -= n
            if self._users > 0 or self._handle is not None or self._c_handle is None:
                return
            handle, self._c_handle = self._c_handle, None
        self._free(handle)






    def __repr__(self) -> str:
        return f"<ember.Model {self.path!r} {'closed' if self.closed else self.description}>"

    # -- metadata ------------------------------------------------------------------------
    def _int(self, fn) -> int:
        return fn(self.handle)

    arch = property(lambda self: L.lib().model_arch(self.handle).decode(), doc="architecture, e.g. 'llama'")
    n_params = property(lambda self: self._int(L.lib().model_n_params), doc="elements in all tensors")
    size = property(lambda self: self._int(L.lib().model_size), doc="bytes of tensor data")
    file_size = property(lambda self: self._int(L.lib().model_file_size), doc="bytes of the GGUF file")
    n_vocab = property(lambda self: self._int(L.lib().model_n_vocab))
    n_ctx_train = property(lambda self: self._int(L.lib().model_n_ctx_train))
    n_embd = property(lambda self: self._int(L.lib().model_n_embd))
    n_layer = property(lambda self: self._int(L.lib().model_n_layer))
    n_head = property(lambda self: self._int(L.lib().model_n_head))
    n_head_kv = property(lambda self: self._int(L.lib().model_n_head_kv))
    n_tensors = property(lambda self: self._int(L.lib().model_n_tensors))
    token_bos = property(lambda self: self._int(L.lib().token_bos), doc="-1 when the model has none")
    token_eos = property(lambda self: self._int(L.lib().token_eos), doc="-1 when the model has none")
    token_eot = property(lambda self: self._int(L.lib().token_eot), doc="-1 when the model has none")
    token_nl = property(lambda self: self._int(L.lib().token_nl), doc="-1 when the model has none")
    add_bos = property(lambda self: self._int(L.lib().model_add_bos) == 1, doc="tokenize() adds a BOS token")

    @property
    def description(self) -> str:
        """One line, e.g. 'llama 24.9M Q8_0, 8 layers'."""
        return _text_call(L.lib().model_desc, self.handle).decode("utf-8", "replace")

    def meta(self, key: str, default: str | None = None) -> str | None:
        """A GGUF metadata value as text (numbers in decimal, arrays as '[a, b, ...]'), or
        `default` when the key does not exist."""
        v = _text_call(L.lib().model_meta_val_str, self.handle, key.encode())
        return default if v is None else v.decode("utf-8", "replace")

    @property
    def metadata(self) -> dict[str, str]:
        """Every metadata key and its value as text."""
        lib, h = L.lib(), self.handle
        out = {}
        for i in range(lib.model_meta_count(h)):
            key = _text_call(lib.model_meta_key_by_index, h, i).decode("utf-8", "replace")
            out[key] = self.meta(key, "")
        return out

    def is_eog(self, token: int) -> bool:
        """True when generation should stop at this token (EOS, EOT, ...)."""
        return L.lib().token_is_eog(self.handle, L.token_id(token)) == 1

    # -- text ----------------------------------------------------------------------------
    def tokenize(self, text: Union[str, bytes], add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of `text`. add_special adds BOS/EOS as the model asks; parse_special turns
        text that spells a control token ("<s>") into that token."""
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        lib, h = L.lib(), self.handle
        cap = len(data) + 8  # one token per byte at most, plus the specials
        while True:
            buf = (ctypes.c_int32 * cap)()
            n = lib.tokenize(h, data, len(data), buf, cap, add_special, parse_special)
            if n < 0:
                L.fail("tokenize failed")
            if n <= cap:
                return buf[:n]
            cap = n

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token (may be part of a UTF-8 sequence, hence bytes)."""
        fn, h, token = L.lib().token_to_piece, self.handle, L.token_id(token)
        piece = _text_call(lambda buf, size: fn(h, token, buf, size, special), initial=64)
        if piece is None:
            L.fail(f"bad token {token}")
        return piece

    def detokenize(self, tokens: Iterable[int], remove_special: bool = False, unparse_special: bool = False) -> str:
        """The text of a token sequence."""
        toks = [L.token_id(t) for t in tokens]
        arr = (ctypes.c_int32 * len(toks))(*toks)
        fn, h = L.lib().detokenize, self.handle
        text = _text_call(lambda buf, size: fn(h, arr, len(toks), buf, size, remove_special, unparse_special),
                          initial=max(64, 8 * len(toks)))
        if text is None:
            L.fail("detokenize failed")
        return text.decode("utf-8", "replace")

    def apply_chat_template(self, messages: Iterable[Message], add_generation_prompt: bool = True,
                            template: str | None = None) -> str:
        """Renders a conversation with the model's chat template (or `template`, Jinja source).
        messages: dicts with "role" and "content", or (role, content) pairs."""
        roles_contents = []
        for m in messages:
            if isinstance(m, Mapping):
                role, content = m["role"], m["content"]
            else:
                role, content = m
            roles_contents.append((str(role).encode(), str(content).encode()))
        arr = (L.ChatMessage * len(roles_contents))(*[L.ChatMessage(r, c) for r, c in roles_contents])
        tmpl = template.encode() if template is not None else None
        text = _text_call(L.lib().chat_apply_template, self.handle, tmpl, arr, len(roles_contents),
                          add_generation_prompt, initial=4096)
        if text is None:
            L.fail("the chat template cannot be rendered")
        return text.decode("utf-8", "replace")
