"""Sampler: a chain of ember_sampler links (include/ember.h, "Sampling")."""

from __future__ import annotations

import ctypes
import random
from typing import Mapping, Sequence

from . import _lib as L
from ._owned import Owned
from .errors import InvalidArgumentError

try:
    import numpy as _np
except ImportError:  # numpy is optional
    _np = None


class Sampler(Owned):
    """Picks tokens from logits. temperature <= 0 is greedy (argmax); otherwise the chain is
    [logit bias] [penalties] top_k, top_p, min_p, temperature, then a seeded random draw (seed
    None: a random seed). Links that would do nothing (top_k <= 0, top_p 1, min_p 0,
    repeat_penalty 1) are left out; the library checks the others' ranges. logit_bias maps token
    ids to values added to their logits (-inf bans a token) and needs n_vocab. One sampler is
    used by one thread at a time."""

    _what = "sampler"

    def __init__(self, temperature: float = 0.8, top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05,
                 seed: int | None = None, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 logit_bias: Mapping[int, float] | None = None, n_vocab: int | None = None):
        self._handle = None
        self.seed = seed if seed is not None else random.SystemRandom().getrandbits(32)
        if not 0 <= self.seed < 2**32:
            raise InvalidArgumentError(f"seed {self.seed} is not a 32-bit unsigned integer", 1)
        lib = L.lib()
        self._free = lib.sampler_free
        chain = L.Sampler_p()
        L.check(lib.sampler_chain_create(ctypes.byref(chain)))
        self._handle = chain
        self.greedy = temperature <= 0
        self.uses_history = repeat_penalty != 1.0
        if logit_bias:
            if n_vocab is None:
                self.close()
                raise InvalidArgumentError("logit_bias needs n_vocab", 1)
            items = list(logit_bias.items())
            arr = (L.LogitBias * len(items))(*[L.LogitBias(L.token_id(t), float(b)) for t, b in items])
            self._add(lib.sampler_create_logit_bias, n_vocab, arr, len(items))
        if self.uses_history:
            self._add(lib.sampler_create_penalties, repeat_last_n, repeat_penalty, 0.0, 0.0)
        if self.greedy:
            self._add(lib.sampler_create_greedy)
        else:
            if top_k > 0:
                self._add(lib.sampler_create_top_k, top_k)
            if top_p != 1.0:
                self._add(lib.sampler_create_top_p, top_p, 1)
            if min_p != 0.0:
                self._add(lib.sampler_create_min_p, min_p, 1)
            self._add(lib.sampler_create_temp, temperature)
            self._add(lib.sampler_create_dist, self.seed)

    def _add(self, create, *args) -> None:
        lib = L.lib()
        link = L.Sampler_p()
        status = create(*args, ctypes.byref(link))
        if status != 0:
            msg = lib.last_error_str()
            self.close()
            L.raise_status(status, msg)
        # The chain owns the link from here on, also when adding fails.
        status = lib.sampler_chain_add(self._handle, link)
        if status != 0:
            msg = lib.last_error_str()
            self.close()
            L.raise_status(status, msg)

    def sample(self, ctx, i: int = -1) -> int:
        """Samples from row i of the context's last logits (-1: the last token) and accepts
        the token into the chain's history."""
        tok = L.lib().sampler_sample(self.handle, ctx.handle, i)
        if tok < 0:
            L.fail("sampling failed")
        return tok

    def sample_logits(self, logits: Sequence[float]) -> int:
        """Samples from a caller's row of logits (a list or a float32 numpy array)."""
        n = len(logits)
        if _np is not None and isinstance(logits, _np.ndarray):
            arr = _np.ascontiguousarray(logits, dtype=_np.float32)
            ptr = arr.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        else:
            ptr = (ctypes.c_float * n)(*logits)
        tok = L.lib().sampler_sample_logits(self.handle, ptr, n)
        if tok < 0:
            L.fail("sampling failed")
        return tok

    def accept(self, token: int) -> None:
        """Records a token chosen elsewhere (e.g. the prompt) in the penalty history."""
        L.check(L.lib().sampler_accept(self.handle, L.token_id(token)))

    def reset(self) -> None:
        """Forgets the history and restarts the random draws from the seed."""
        L.check(L.lib().sampler_reset(self.handle))


    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._free(handle)



