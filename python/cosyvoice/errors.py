"""Typed exceptions: one class per cosy_status (include/cosyvoice.h, "status codes").

Every failed library call raises a subclass of CosyError carrying
  .status   the cosy_status code (int),
  .message  cosy_last_error() read on the failing thread right after the call,
  .where    the C function that failed.
Some also derive from the matching built-in exception (InvalidArgument is a ValueError, Timeout
a TimeoutError, IOError_ an OSError, OutOfMemory a MemoryError) so generic handlers catch them.
A model or voice file that does not exist raises FileNotFound, an IOError_ that is also Python's
FileNotFoundError.
"""
from __future__ import annotations

import errno
import os
from typing import Any, Dict, Optional, Tuple, Type, Union

from . import _capi


class CosyError(Exception):
    """A failed libcosyvoice call."""

    status: Optional[int] = None   # set per subclass; the base class is raised for codes this
    #                                package does not know

    def __init__(self, status: int, message: str = "", where: str = "") -> None:
        """status: the cosy_status; message: cosy_last_error(); where: the C function."""
        self.status = status
        self.message = message
        self.where = where
        try:
            text = _capi.status_str(status)
        except OSError:
            text = "status"
        super().__init__(f"{where + ': ' if where else ''}{text} ({status}): {message}")

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.status, self.message, self.where))


class InvalidArgument(CosyError, ValueError):
    """COSY_ERR_INVALID_ARG: a parameter is out of range or missing (the message names it)."""
    status = _capi.ERR_INVALID_ARG


class StructSizeError(CosyError):
    """COSY_ERR_STRUCT_SIZE: a struct is older than the library accepts."""
    status = _capi.ERR_STRUCT_SIZE


class OutOfMemory(CosyError, MemoryError):
    """COSY_ERR_NO_MEMORY: host memory ran out."""
    status = _capi.ERR_NO_MEMORY


class GpuOutOfMemory(CosyError):
    """COSY_ERR_GPU_NO_MEMORY: device memory ran out."""
    status = _capi.ERR_GPU_NO_MEMORY


class CudaError(CosyError):
    """COSY_ERR_CUDA: a CUDA call failed (no GPU, no driver, ...: the message says which)."""
    status = _capi.ERR_CUDA


class DeviceLost(CosyError):
    """Sticky CUDA error: the engine must be destroyed."""
    status = _capi.ERR_DEVICE_LOST


class IOError_(CosyError, OSError):
    """COSY_ERR_IO: a file could not be opened, read or written (an OSError)."""
    status = _capi.ERR_IO


class FileNotFound(IOError_, FileNotFoundError):
    """COSY_ERR_IO for a model or voice file that does not exist: an IOError_ and Python's
    FileNotFoundError (errno ENOENT, .filename the path)."""

    def __init__(self, status: int = _capi.ERR_IO, message: str = "", where: str = "",
                 filename: Optional[Union[str, "os.PathLike[str]"]] = None) -> None:
        """As CosyError, plus the missing file's path."""
        super().__init__(status, message, where)
        self.errno = errno.ENOENT
        self.strerror = os.strerror(errno.ENOENT)
        self.filename = os.fspath(filename) if filename is not None else None

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> Tuple[Any, ...]:
        return (type(self), (self.status, self.message, self.where, self.filename))


class ModelFormatError(CosyError):
    """COSY_ERR_MODEL_FORMAT: the model or voice file is not one this library reads."""
    status = _capi.ERR_MODEL_FORMAT


class ModelVersionError(CosyError):
    """COSY_ERR_MODEL_VERSION: the file's format version is newer or older than supported."""
    status = _capi.ERR_MODEL_VERSION


class Unsupported(CosyError):
    """COSY_ERR_UNSUPPORTED: not available with this build, device or model file."""
    status = _capi.ERR_UNSUPPORTED


class Cancelled(CosyError):
    """COSY_ERR_CANCELLED: the request was cancelled (Request.cancel, a closed engine)."""
    status = _capi.ERR_CANCELLED


class Timeout(CosyError, TimeoutError):
    """Nothing arrived in time; the request continues."""
    status = _capi.ERR_TIMEOUT


class QueueFull(CosyError):
    """COSY_ERR_QUEUE_FULL: the engine's queue (max_queued) is full; retry later."""
    status = _capi.ERR_QUEUE_FULL


class TextError(CosyError, ValueError):
    """Invalid UTF-8, or nothing to say after normalization."""
    status = _capi.ERR_TEXT


class InternalError(CosyError):
    """COSY_ERR_INTERNAL: a bug in the library (please report it with the message)."""
    status = _capi.ERR_INTERNAL


BY_STATUS: Dict[int, Type[CosyError]] = {c.status: c for c in (InvalidArgument, StructSizeError, OutOfMemory, GpuOutOfMemory,
                                   CudaError, DeviceLost, IOError_, ModelFormatError,
                                   ModelVersionError, Unsupported, Cancelled, Timeout, QueueFull,
                                   TextError, InternalError)}


def error_for(status: int, message: str = "", where: str = "") -> CosyError:
    """The exception for a status code (CosyError itself for a code this package does not know)."""
    return BY_STATUS.get(status, CosyError)(status, message, where)


def check(status: int, where: str) -> None:
    """Raise the typed exception when status is not COSY_OK (reads cosy_last_error() at once, on
    this thread, as the header asks)."""
    if status != _capi.OK:
        raise error_for(status, _capi.last_error(), where)
