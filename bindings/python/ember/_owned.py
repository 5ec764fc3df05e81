"""The plumbing every wrapper of a C handle shares: `with` support, close on garbage
collection, `closed`, and `handle` (which raises once the object is closed)."""

from __future__ import annotations

from .errors import InvalidArgumentError


class Owned:
    _what = "object"  # the noun in "the model is closed"
    _handle = None

    def close(self) -> None:  # subclasses free their handle
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def closed(self) -> bool:
        return self._handle is None

    @property
    def handle(self):
        if self._handle is None:
            raise InvalidArgumentError(f"the {self._what} is closed", 1)
        return self._handle
