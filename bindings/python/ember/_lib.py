"""Finding and loading libember, and the ctypes declarations of the C ABI (include/ember.h).

Only this module knows about ctypes prototypes and struct layouts. The layouts are those of
ABI version 1; load() refuses a library that does not accept ABI 1 (ember_check_abi) or
whose params structs have a different size, so a mismatch is an error and never a crash.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import sysconfig
import threading
from pathlib import Path

from .errors import LibraryNotFoundError, Error, raise_status

ABI_VERSION = 1  # EMBER_ABI_VERSION of the header these declarations mirror

c_int32, c_uint32, c_uint64, c_uint8, c_int8 = (ctypes.c_int32, ctypes.c_uint32, ctypes.c_uint64,
                                                 ctypes.c_uint8, ctypes.c_int8)
c_float, c_size_t, c_char_p, c_void_p = ctypes.c_float, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p
P = ctypes.POINTER

ProgressCallback = ctypes.CFUNCTYPE(ctypes.c_int, c_float, c_void_p)
AbortCallback = ctypes.CFUNCTYPE(ctypes.c_int, c_void_p)


class ModelParams(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("n_gpu_layers", c_int32), ("device", c_char_p),
                ("progress_callback", ProgressCallback), ("progress_user_data", c_void_p),
                ("use_mmap", c_uint8), ("vocab_only", c_uint8), ("reserved", c_uint8 * 6)]


class ContextParams(ctypes.Structure):
    _fields_ = [("struct_size", c_uint32), ("n_ctx", c_uint32), ("n_batch", c_uint32), ("n_ubatch", c_uint32),
                ("n_seq_max", c_uint32), ("n_threads", c_int32), ("type_k", c_int32), ("type_v", c_int32),
                ("abort_callback", AbortCallback), ("abort_user_data", c_void_p),
                ("device_top_k", c_int32)]  # added later: ember_context_params.device_top_k (0 = off)


class Batch(ctypes.Structure):
    _fields_ = [("n_tokens", c_int32), ("token", P(c_int32)), ("pos", P(c_int32)),
                ("seq_id", P(c_int32)), ("logits", P(c_int8))]


class LogitBias(ctypes.Structure):
    _fields_ = [("token", c_int32), ("bias", c_float)]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


Model_p = c_void_p  # opaque handles
Context_p = c_void_p
Sampler_p = c_void_p
Stream_p = c_void_p

# name: (restype, argtypes)
_PROTOTYPES = {
    "ember_status_str": (c_char_p, [c_int32]),
    "ember_last_error": (c_char_p, []),
    "ember_version_string": (c_char_p, []),
    "ember_version_number": (c_uint32, []),
    "ember_abi_version": (c_uint32, []),
    "ember_check_abi": (c_int32, [c_uint32]),
    "ember_init": (c_int32, []),
    "ember_type_name": (c_char_p, [c_int32]),
    "ember_type_from_name": (c_int32, [c_char_p]),
    "ember_device_count": (c_int32, []),
    "ember_device_name": (c_char_p, [c_int32]),
    "ember_device_description": (c_char_p, [c_int32]),
    "ember_device_copy_bandwidth": (c_int32, [c_int32, c_uint64, P(ctypes.c_double)]),
    "ember_model_default_params": (ModelParams, []),
    "ember_model_load": (c_int32, [c_char_p, P(ModelParams), P(Model_p)]),
    "ember_model_free": (None, [Model_p]),
    "ember_model_arch": (c_char_p, [Model_p]),
    "ember_model_n_params": (c_uint64, [Model_p]),
    "ember_model_size": (c_uint64, [Model_p]),
    "ember_model_file_size": (c_uint64, [Model_p]),
    "ember_model_n_vocab": (c_int32, [Model_p]),
    "ember_model_n_ctx_train": (c_int32, [Model_p]),
    "ember_model_n_embd": (c_int32, [Model_p]),
    "ember_model_n_layer": (c_int32, [Model_p]),
    "ember_model_n_head": (c_int32, [Model_p]),
    "ember_model_n_head_kv": (c_int32, [Model_p]),
    "ember_model_n_tensors": (c_int32, [Model_p]),
    "ember_token_bos": (c_int32, [Model_p]),
    "ember_token_eos": (c_int32, [Model_p]),
    "ember_token_eot": (c_int32, [Model_p]),
    "ember_token_nl": (c_int32, [Model_p]),
    "ember_token_is_eog": (c_int32, [Model_p, c_int32]),
    "ember_token_is_control": (c_int32, [Model_p, c_int32]),
    "ember_model_add_bos": (c_int32, [Model_p]),
    "ember_model_meta_count": (c_int32, [Model_p]),
    "ember_model_meta_key_by_index": (c_int32, [Model_p, c_int32, c_char_p, c_size_t]),
    "ember_model_meta_val_str": (c_int32, [Model_p, c_char_p, c_char_p, c_size_t]),
    "ember_model_desc": (c_int32, [Model_p, c_char_p, c_size_t]),
    "ember_context_default_params": (ContextParams, []),
    "ember_context_create": (c_int32, [Model_p, P(ContextParams), P(Context_p)]),
    "ember_context_free": (None, [Context_p]),
    "ember_context_n_ctx": (c_uint32, [Context_p]),
    "ember_context_n_batch": (c_uint32, [Context_p]),
    "ember_context_n_threads": (c_int32, [Context_p]),
    "ember_context_set_n_threads": (c_int32, [Context_p, c_int32]),
    "ember_decode": (c_int32, [Context_p, P(Batch)]),
    "ember_get_logits_ith": (P(c_float), [Context_p, c_int32]),
    "ember_kv_cache_clear": (c_int32, [Context_p]),
    "ember_kv_cache_seq_rm": (c_int32, [Context_p, c_int32, c_int32, c_int32]),
    "ember_kv_cache_seq_pos_max": (c_int32, [Context_p, c_int32]),
    "ember_kv_cache_used": (c_int32, [Context_p]),
    "ember_tokenize": (c_int32, [Model_p, c_char_p, c_int32, P(c_int32), c_int32, c_uint8, c_uint8]),
    "ember_token_to_piece": (c_int32, [Model_p, c_int32, c_char_p, c_int32, c_uint8]),
    "ember_detokenize": (c_int32, [Model_p, P(c_int32), c_int32, c_char_p, c_int32, c_uint8, c_uint8]),
    "ember_token_stream_create": (c_int32, [Model_p, c_uint8, P(Stream_p)]),
    "ember_token_stream_push": (c_int32, [Stream_p, c_int32, c_char_p, c_int32]),
    "ember_token_stream_flush": (c_int32, [Stream_p, c_char_p, c_int32]),
    "ember_token_stream_free": (None, [Stream_p]),
    "ember_chat_apply_template": (c_int32, [Model_p, c_char_p, P(ChatMessage), c_size_t, c_uint8, c_char_p, c_int32]),
    "ember_chat_builtin_template": (c_char_p, [c_char_p]),
    "ember_sampler_chain_create": (c_int32, [P(Sampler_p)]),
    "ember_sampler_chain_add": (c_int32, [Sampler_p, Sampler_p]),
    "ember_sampler_create_greedy": (c_int32, [P(Sampler_p)]),
    "ember_sampler_create_dist": (c_int32, [c_uint32, P(Sampler_p)]),
    "ember_sampler_create_temp": (c_int32, [c_float, P(Sampler_p)]),
    "ember_sampler_create_top_k": (c_int32, [c_int32, P(Sampler_p)]),
    "ember_sampler_create_top_p": (c_int32, [c_float, c_size_t, P(Sampler_p)]),
    "ember_sampler_create_min_p": (c_int32, [c_float, c_size_t, P(Sampler_p)]),
    "ember_sampler_create_penalties": (c_int32, [c_int32, c_float, c_float, c_float, P(Sampler_p)]),
    "ember_sampler_create_logit_bias": (c_int32, [c_int32, P(LogitBias), c_size_t, P(Sampler_p)]),
    "ember_sampler_sample": (c_int32, [Sampler_p, Context_p, c_int32]),
    "ember_sampler_sample_logits": (c_int32, [Sampler_p, P(c_float), c_int32]),
    "ember_sampler_accept": (c_int32, [Sampler_p, c_int32]),
    "ember_sampler_reset": (c_int32, [Sampler_p]),
    "ember_sampler_free": (None, [Sampler_p]),
}


def _lib_names() -> list[str]:
    if sys.platform == "darwin":
        return ["libember.1.dylib", "libember.dylib"]
    if sys.platform == "win32":
        return ["ember.dll", "libember.dll"]
    return ["libember.so.1", "libember.so"]


def _candidates() -> list[tuple[str, str]]:
    """(where, path-or-name) pairs in search order, EMBER_LIBRARY excluded."""
    out: list[tuple[str, str]] = []
    # The build tree, when the package is used from a source checkout (bindings/python/ember).
    here = Path(__file__).resolve().parent
    if here.parent.name == "python" and here.parent.parent.name == "bindings":
        root = here.parents[2]
        for build in ("build", "build-release"):
            for name in _lib_names():
                out.append(("build tree", str(root / build / "lib" / name)))
    # An installed copy: the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache), then
    # the usual `cmake --install` prefixes.
    found = ctypes.util.find_library("ember")
    if found:
        out.append(("ctypes.util.find_library", found))
    for name in _lib_names():
        out.append(("dynamic loader", name))
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for prefix in dict.fromkeys([sys.prefix, os.path.expanduser("~/.local"), "/usr/local", "/usr"]):
        for libdir in ("lib", "lib64", f"lib/{multiarch}" if multiarch else None):
            if libdir:
                out.append((f"prefix {prefix}", os.path.join(prefix, libdir, _lib_names()[0])))
    return out


def find_and_open() -> tuple[ctypes.CDLL, str]:
    """Opens libember from EMBER_LIBRARY, the build tree or an installed copy.

    EMBER_LIBRARY (a file, or a directory holding libember) wins and is the only place looked
    at when set, so a wrong setting is reported instead of silently picking another copy."""
    tried: list[str] = []
    env = os.environ.get("EMBER_LIBRARY")
    if env:
        paths = [os.path.join(env, n) for n in _lib_names()] if os.path.isdir(env) else [env]
        for p in paths:
            try:
                return ctypes.CDLL(p), p
            except OSError as e:
                tried.append(f"EMBER_LIBRARY: {p} ({_why(p, e)})")
        raise LibraryNotFoundError(_not_found_message(tried, env_set=True))
    tried.append("EMBER_LIBRARY: not set")
    for where, p in _candidates():
        is_path = os.sep in p
        if is_path and not os.path.exists(p):
            tried.append(f"{where}: {p} (no such file)")
            continue
        try:
            return ctypes.CDLL(p), p
        except OSError as e:
            tried.append(f"{where}: {p} ({_why(p, e)})")
    raise LibraryNotFoundError(_not_found_message(tried, env_set=False))


def _why(path: str, e: OSError) -> str:
    if os.sep in path and not os.path.exists(path):
        return "no such file"
    return str(e).split(": ", 1)[-1] if str(e) else "cannot be loaded"


def _not_found_message(tried: list[str], env_set: bool) -> str:
    hint = ("fix EMBER_LIBRARY or unset it" if env_set else
            "build Ember (cmake -S . -B build && cmake --build build), set EMBER_LIBRARY to the "
            "path of libember (e.g. build/lib/libember.so), or install it (cmake --install build)")
    return "cannot find libember. Looked at:\n  " + "\n  ".join(tried) + "\n" + hint


class _Lib:
    """The loaded library: one attribute per C function, without the ember_ prefix."""

    def __init__(self, cdll: ctypes.CDLL, path: str):
        self.path = path
        self.cdll = cdll
        missing = []
        for name, (restype, argtypes) in _PROTOTYPES.items():
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                missing.append(name)
                continue
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, name[len("ember_"):], fn)
        if "ember_check_abi" in missing:
            raise LibraryNotFoundError(f"{path} is not libember (no ember_check_abi)")
        # The ABI check comes first: on a mismatch nothing else of the library is trusted.
        status = self.check_abi(ABI_VERSION)
        if status != 0:
            raise_status(status, f"{path}: {self.last_error_str()}" if self.last_error_str() else
                         f"{path}: library ABI {self.abi_version()} does not accept ABI {ABI_VERSION}")
        if missing:
            raise Error(f"{path} lacks {', '.join(missing)}: it is older than these bindings")
        for fn, struct in ((self.model_default_params, ModelParams), (self.context_default_params, ContextParams)):
            size = fn().struct_size
            if size != ctypes.sizeof(struct):
                raise Error(f"{path}: {struct.__name__} is {size} bytes, the bindings expect "
                            f"{ctypes.sizeof(struct)}: the library and the bindings disagree on ABI {ABI_VERSION}")
        status = self.init()
        if status != 0:
            raise_status(status, self.last_error_str())

    def last_error_str(self) -> str:
        return self.last_error().decode("utf-8", "replace")


_lock = threading.Lock()
_lib: _Lib | None = None


def lib() -> _Lib:
    """The library, loaded on first use (thread-safe); raises LibraryNotFoundError."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                cdll, path = find_and_open()
                _lib = _Lib(cdll, path)
    return _lib


def check(status: int) -> None:
    """Raises the Error subclass of a failed status with this thread's ember_last_error()."""
    if status != 0:
        raise_status(status, lib().last_error_str())


def token_id(t) -> int:
    """A token id as a Python int, refusing values ctypes would wrap around in an int32_t."""
    v = int(t)
    if not -2**31 <= v < 2**31:
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(f"token id {v} is not a 32-bit integer", 1)
    return v


def fail(what: str) -> None:
    """For calls that return -1/NULL instead of a status: the message says what failed."""
    from .errors import InvalidArgumentError

    raise InvalidArgumentError(lib().last_error_str() or what)
