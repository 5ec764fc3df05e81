"""Python bindings of Ember, an embeddable LLM inference runtime.

    import ember
    with ember.Model("models/ember-kjv-25m-q8_0.gguf") as model, ember.Context(model) as ctx:
        for piece in ctx.generate("And God said unto Moses,", max_tokens=32, temperature=0):
            print(piece, end="", flush=True)

The bindings load libember through its C ABI (include/ember.h) with ctypes, so installing them
needs no compiler. The library is found from the EMBER_LIBRARY environment variable (a file or
a directory), a source checkout's build/lib/, or an installed copy (the dynamic loader's search
path, /usr/local/lib, ...). The ABI version is checked before anything else is called.

Threads: a Model may be shared by any number of threads; use one Context per thread. Calls
into the library release the GIL.
"""

from __future__ import annotations

import ctypes

from . import _lib
from .context import Context, Generation, TokenStream
from .errors import (BackendError, BadFormatError, CancelledError, ContextFullError, Error, FileIOError,
                     InternalError, InvalidArgumentError, LibraryNotFoundError, OutOfMemoryError, UnsupportedError)
from .model import Model
from .sampler import Sampler

__version__ = "0.1.0"
ABI_VERSION = _lib.ABI_VERSION

__all__ = ["Model", "Context", "Sampler", "TokenStream", "Generation", "Error", "InvalidArgumentError",
           "OutOfMemoryError", "FileIOError", "BadFormatError", "UnsupportedError", "BackendError",
           "ContextFullError", "CancelledError", "InternalError", "LibraryNotFoundError", "library_path",
           "version", "devices", "device_descriptions", "device_bandwidth", "status_str", "ABI_VERSION"]


def library_path() -> str:
    """The path of the libember these bindings use (loading it on first call)."""
    return _lib.lib().path


def version() -> str:
    """The library's version string, e.g. '0.1.0'."""
    return _lib.lib().version_string().decode()


def devices() -> list[str]:
    """Names of the compute devices ("cpu" first)."""
    lib = _lib.lib()
    return [lib.device_name(i).decode() for i in range(lib.device_count())]


def device_descriptions() -> list[str]:
    """Descriptions of the compute devices, in the order of devices() (GPU name, memory, driver)."""
    lib = _lib.lib()
    return [lib.device_description(i).decode("utf-8", "replace") for i in range(lib.device_count())]


def device_bandwidth(index: int, mib: int = 0) -> float:
    """Copy bandwidth of device `index` (read + written GB/s) over a copy of `mib` MiB in its own
    memory (0: 1 GiB, 256 MiB on the CPU)."""
    lib = _lib.lib()
    gbs = ctypes.c_double(0.0)
    _lib.check(lib.device_copy_bandwidth(index, mib << 20, ctypes.byref(gbs)))
    return gbs.value


def status_str(status: int) -> str:
    """The library's name for a status code ("EMBER_ERR_IO: i/o error")."""
    return _lib.lib().status_str(status).decode()
