"""Exceptions: one class per ember_status code, all subclasses of ember.Error."""

from __future__ import annotations


class Error(Exception):
    """An Ember failure. `status` is the ember_status code (None for failures found by the
    bindings themselves, such as a missing library) and `message` the library's
    ember_last_error() text for that call."""

    status: int | None = None

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(Error, ValueError):
    status = 1  # EMBER_ERR_INVALID_ARG


class OutOfMemoryError(Error, MemoryError):
    status = 2  # EMBER_ERR_OOM


class FileIOError(Error):
    status = 3  # EMBER_ERR_IO


class BadFormatError(Error):
    status = 4  # EMBER_ERR_BAD_FORMAT


class UnsupportedError(Error):
    status = 5  # EMBER_ERR_UNSUPPORTED


class BackendError(Error):
    status = 6  # EMBER_ERR_BACKEND


class ContextFullError(Error):
    status = 7  # EMBER_ERR_CONTEXT_FULL


class CancelledError(Error):
    status = 8  # EMBER_ERR_CANCELLED


class InternalError(Error):
    status = 9  # EMBER_ERR_INTERNAL


class LibraryNotFoundError(Error, OSError):
    """libember could not be found or loaded; the message lists every place looked at."""


_BY_STATUS = {cls.status: cls for cls in (InvalidArgumentError, OutOfMemoryError, FileIOError, BadFormatError,
                                          UnsupportedError, BackendError, ContextFullError, CancelledError,
                                          InternalError)}


def error_class(status: int) -> type[Error]:
    """The class for a status code; codes newer than these bindings map to Error."""
    return _BY_STATUS.get(status, Error)


def raise_status(status: int, message: str) -> None:
    cls = error_class(status)
    raise cls(message or f"ember status {status}", status)
