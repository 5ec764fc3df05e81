"""Context (a KV cache on one model), text generation and the streaming detokenizer."""

from __future__ import annotations

import ctypes
import weakref
from typing import Callable, Iterable, Iterator, Mapping, Sequence, Union

from . import _lib as L
from ._owned import Owned
from .errors import ContextFullError, InvalidArgumentError
from .model import Message, Model
from .sampler import Sampler

try:
    import numpy as _np
except ImportError:  # numpy is optional: logits are then a plain list
    _np = None


def _type_id(t: Union[str, int], what: str) -> int:
    if isinstance(t, int):
        return t
    tid = L.lib().type_from_name(str(t).encode())
    if tid < 0:
        raise InvalidArgumentError(f"{what}: unknown type {t!r} (try 'f16', 'f32', 'q8_0', 'q4_0')", 1)
    return tid


class TokenStream(Owned):
    """Streaming detokenizer: push() tokens one at a time and get text as soon as it is
    complete UTF-8; flush() returns what is held back."""

    _what = "token stream"

    def __init__(self, model: Model, unparse_special: bool = False):
        lib = L.lib()
        self._handle = None
        self._free = lib.token_stream_free
        self._model = model  # the stream reads the model's vocabulary: keep it alive
        handle = L.Stream_p()
        mh = model._retain()
        try:
            L.check(lib.token_stream_create(mh, unparse_special, ctypes.byref(handle)))
        except BaseException:
            model._release()
            raise
        self._handle = handle
        self._buf = ctypes.create_string_buffer(256)

    def _call(self, fn, *args) -> str:
        while True:
            n = fn(self.handle, *args, self._buf, len(self._buf))
            if n < 0:
                L.fail("bad token")
            if n <= len(self._buf):
                return self._buf.raw[:n].decode("utf-8", "replace")
            self._buf = ctypes.create_string_buffer(n)  # nothing was taken: retry with room

    def push(self, token: int) -> str:
        return self._call(L.lib().token_stream_push, L.token_id(token))

    def flush(self) -> str:
        return self._call(L.lib().token_stream_flush)

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._free(handle)
            self._model._release()





class Context(Owned):
    """A KV cache and compute buffers for one model (sequence 0). Use one context per thread;
    the model may be shared. The context keeps its model alive; closing the model closes it.

    n_ctx: cache size in tokens (0 = the model's trained context); kv_type: cache type for K
    and V ("f16" default, "f32", "q8_0", "q4_0"; type_k / type_v set them apart); n_threads:
    CPU threads (0 = all cores); abort: an optional callable polled during eval, returning True
    stops it (CancelledError)."""

    _what = "context"

    def __init__(self, model: Model, n_ctx: int = 0, kv_type: Union[str, int] = "f16", *,
                 type_k: Union[str, int, None] = None, type_v: Union[str, int, None] = None,
                 n_batch: int | None = None, n_ubatch: int | None = None, n_threads: int = 0,
                 abort: Callable[[], object] | None = None):
        lib = L.lib()
        self._handle = None
        self._free = lib.context_free
        self.model = model
        params = lib.context_default_params()
        params.n_ctx = n_ctx
        params.type_k = _type_id(type_k if type_k is not None else kv_type, "type_k")
        params.type_v = _type_id(type_v if type_v is not None else kv_type, "type_v")
        if n_batch is not None:
            params.n_batch = n_batch
        if n_ubatch is not None:
            params.n_ubatch = n_ubatch
        params.n_threads = n_threads
        if abort is not None:
            def on_abort(_user):
                try:
                    return 1 if abort() else 0
                except BaseException:  # must not cross the C frames: stop the eval instead
                    return 1

            params.abort_callback = L.AbortCallback(on_abort)
            self._abort_cb = params.abort_callback  # called during every eval: keep it alive
        handle = L.Context_p()
        mh = model._retain()
        try:
            L.check(lib.context_create(mh, ctypes.byref(params), ctypes.byref(handle)))
        except BaseException:
            model._release()
            raise
        self._handle = handle
        model._contexts.add(self)
        self._tokens: list[int] = []  # what the cache holds, in order
        self._active = None  # weak reference to the generation that uses the logits, if any
        self._n_vocab = model.n_vocab
        self._n_batch = lib.context_n_batch(handle)
        # one-token batches are the decode loop's: build them once
        self._one = (ctypes.c_int32 * 1)()
        self._one_batch = L.Batch(1, self._one, None, None, None)

    # -- lifetime ------------------------------------------------------------------------
    def close(self) -> None:
        """Frees the context. Idempotent."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._free(handle)
            self.model._release()






    # -- state ---------------------------------------------------------------------------
    n_ctx = property(lambda self: L.lib().context_n_ctx(self.handle), doc="KV cache size in tokens")
    n_batch = property(lambda self: L.lib().context_n_batch(self.handle), doc="max tokens per decode call")
    kv_used = property(lambda self: L.lib().kv_cache_used(self.handle), doc="cache cells in use")

    @property
    def n_threads(self) -> int:
        return L.lib().context_n_threads(self.handle)

    @n_threads.setter
    def n_threads(self, n: int) -> None:
        L.check(L.lib().context_set_n_threads(self.handle, n))

    @property
    def tokens(self) -> list[int]:
        """The tokens the cache holds, in order."""
        return list(self._tokens)

    def reset(self) -> None:
        """Empties the cache."""
        L.check(L.lib().kv_cache_clear(self.handle))
        self._tokens.clear()

    def truncate(self, n_keep: int) -> None:
        """Keeps the first n_keep cached tokens and drops the rest."""
        if n_keep < len(self._tokens):
            L.check(L.lib().kv_cache_seq_rm(self.handle, 0, max(n_keep, 0), -1))
            del self._tokens[max(n_keep, 0):]

    # -- evaluation ----------------------------------------------------------------------
    def eval(self, tokens: Iterable[int]) -> None:
        """Evaluates tokens after those already cached (in batches of n_batch). Afterwards
        `logits` holds the prediction after the last one. On an error the batches already
        evaluated stay in the cache (`tokens` says which)."""
        lib, h = L.lib(), self.handle
        toks = [L.token_id(t) for t in tokens]
        if not toks:
            raise InvalidArgumentError("eval: no tokens", 1)
        if len(toks) == 1:
            self._one[0] = toks[0]
            L.check(lib.decode(h, ctypes.byref(self._one_batch)))
            self._tokens.append(toks[0])
            return
        for i in range(0, len(toks), self._n_batch):
            chunk = toks[i:i + self._n_batch]
            arr = (ctypes.c_int32 * len(chunk))(*chunk)
            batch = L.Batch(len(chunk), arr, None, None, None)
            L.check(lib.decode(h, ctypes.byref(batch)))
            self._tokens.extend(chunk)

    @property
    def logits(self):
        """The last evaluated token's logits (n_vocab floats): a float32 numpy array when numpy
        is installed, a list otherwise. A copy: it stays valid after the next eval."""
        ptr = L.lib().get_logits_ith(self.handle, -1)
        if not ptr:
            L.fail("no logits: nothing evaluated yet")
        if _np is not None:
            return _np.ctypeslib.as_array(ptr, shape=(self._n_vocab,)).copy()
        return ptr[:self._n_vocab]

    # -- generation ----------------------------------------------------------------------
    def _prefill(self, prompt: Sequence[int]) -> None:
        """Makes the cache hold exactly `prompt` with fresh logits for its last token, reusing
        the longest cached prefix (a chat's earlier turns are not evaluated again)."""
        if not prompt:
            raise InvalidArgumentError("empty prompt", 1)
        n_keep = 0
        for a, b in zip(self._tokens, prompt):
            if a != b:
                break
            n_keep += 1
        n_keep = min(n_keep, len(prompt) - 1)  # evaluate at least one token to get its logits
        self.truncate(n_keep)
        self.eval(prompt[n_keep:])

    def generate(self, prompt: Union[str, Sequence[int]], max_tokens: int = 128, temperature: float = 0.8,
                 top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05, seed: int | None = None,
                 stop: Sequence[str] = (), *, repeat_penalty: float = 1.0,
                 logit_bias: Mapping[int, float] | None = None, add_special: bool = True,
                 parse_special: bool = False) -> "Generation":
        """Continues `prompt` (text, or token ids) and returns an iterator over text pieces as
        they are generated. The prompt is evaluated here (errors such as ContextFullError raise
        now); generation stops after max_tokens tokens, at an end-of-generation token, before
        the first stop string, or when the cache is full (see Generation.finish_reason).
        temperature <= 0 is greedy; seed makes sampling reproducible; logit_bias maps token ids
        to values added to their logits (float("-inf") bans one). A new generate() or chat()
        on the same context ends the previous one."""
        if isinstance(prompt, (str, bytes)):
            tokens = self.model.tokenize(prompt, add_special=add_special, parse_special=parse_special)
        else:
            tokens = [L.token_id(t) for t in prompt]
        if isinstance(stop, str):
            stop = [stop]
        active = self._active() if self._active is not None else None
        if active is not None:
            active.close()
        sampler = Sampler(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, seed=seed,
                          repeat_penalty=repeat_penalty, logit_bias=logit_bias, n_vocab=self._n_vocab)
        try:
            self._prefill(tokens)
            if sampler.uses_history:
                for t in tokens:
                    sampler.accept(t)
        except BaseException:
            sampler.close()
            raise
        gen = Generation(self, sampler, max_tokens, list(stop))
        self._active = weakref.ref(gen)  # weak: a generation refers to its context, no cycle
        return gen

    def chat(self, messages: Iterable[Message], max_tokens: int = 256, template: str | None = None,
             **kwargs) -> "Generation":
        """Renders the conversation with the model's chat template (or `template`) and
        generates the assistant's answer; keyword arguments as generate(). Earlier turns that
        are still cached are not evaluated again."""
        text = self.model.apply_chat_template(list(messages), add_generation_prompt=True, template=template)
        # The rendered text spells special tokens: parse them, and add BOS only when the
        # template did not write it.
        bos = self.model.token_bos
        bos_text = self.model.token_to_piece(bos, special=True).decode("utf-8", "replace") if bos >= 0 else ""
        add_special = not (bos_text and text.startswith(bos_text))
        tokens = self.model.tokenize(text, add_special=add_special, parse_special=True)
        return self.generate(tokens, max_tokens=max_tokens, **kwargs)


class Generation:
    """The iterator returned by Context.generate() and chat(): yields text pieces (str).

    After the iteration: `tokens` holds the generated ids, `text` the whole text, and
    `finish_reason` one of "length" (max_tokens), "eog" (an end-of-generation token),
    "stop" (a stop string; the text ends before it) or "context_full"."""

    def __init__(self, ctx: Context, sampler: Sampler, max_tokens: int, stop: list[str]):
        # The running generator gets the state, not self: no reference cycle, so dropping the
        # Generation frees its sampler and stream at once.
        self._state = _GenerationState()
        self._pieces: list[str] = []
        self._sampler = sampler
        self._it = _run(self._state, ctx, sampler, max_tokens, [s for s in stop if s])

    @property
    def tokens(self) -> list[int]:
        """The generated token ids so far."""
        return self._state.tokens

    @property
    def finish_reason(self) -> str | None:
        """Why the generation ended, None while it runs (or when closed early)."""
        return self._state.finish_reason

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        piece = next(self._it)
        self._pieces.append(piece)
        return piece

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def read(self) -> str:
        """Runs the generation to its end and returns the whole text."""
        for _ in self:
            pass
        return self.text

    def close(self) -> None:
        """Stops early and frees the sampler and the stream."""
        self._it.close()
        self._sampler.close()



class _GenerationState:
    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.finish_reason: str | None = None


def _run(st: _GenerationState, ctx: Context, sampler: Sampler, max_tokens: int, stop: list[str]) -> Iterator[str]:
    model = ctx.model
    stream = TokenStream(model)
    pending = ""  # text held back because it may be the start of a stop string
    try:
        while True:
            if len(st.tokens) >= max_tokens:
                st.finish_reason = "length"
                break
            tok = sampler.sample(ctx)
            if model.is_eog(tok):
                st.finish_reason = "eog"
                break
            st.tokens.append(tok)
            piece = stream.push(tok)
            if stop:
                out, pending, hit = _cut_at_stop(pending + piece, stop, final=False)
                if out:
                    yield out
                if hit:
                    st.finish_reason = "stop"
                    return
            elif piece:
                yield piece
            if len(st.tokens) >= max_tokens:
                st.finish_reason = "length"  # the last token is not evaluated: nobody needs its logits
                break
            try:
                ctx.eval((tok,))
            except ContextFullError:
                st.finish_reason = "context_full"
                break
        tail = pending + stream.flush()
        if stop:
            tail, _, hit = _cut_at_stop(tail, stop, final=True)
            if hit:
                st.finish_reason = "stop"
        if tail:
            yield tail
    finally:
        stream.close()
        sampler.close()


def _cut_at_stop(text: str, stop: list[str], final: bool) -> tuple[str, str, bool]:
    """Splits streamed text into (text to emit, text to hold back, stop string found)."""
    first = -1
    for s in stop:
        i = text.find(s)
        if i >= 0 and (first < 0 or i < first):
            first = i
    if first >= 0:
        return text[:first], "", True
    if final:
        return text, "", False
    # hold back the longest tail that could still grow into a stop string
    hold = 0
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:k]):
                hold = k
                break
    return text[:len(text) - hold], text[len(text) - hold:], False
