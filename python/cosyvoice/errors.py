"""Typed exceptions: one class per cosy_status (include/cosyvoice.h, "status codes").

Every failed library call raises a subclass of CosyError carrying
  .status   the cosy_status code (int),
  .message  cosy_last_error() read on the failing thread right after the call,
  .where    the C function that failed.
Some also derive from the matching built-in exception (InvalidArgument is a ValueError, Timeout
a TimeoutError, IOError_ an OSError, OutOfMemory a MemoryError) so generic handlers catch them.
"""
from . import _capi


class CosyError(Exception):
    """A failed libcosyvoice call."""

    status = None   # set per subclass; the base class is raised for codes this package does not know

    def __init__(self, status, message="", where=""):
        self.status = status
        self.message = message
        self.where = where
        try:
            text = _capi.status_str(status)
        except OSError:
            text = "status"
        super().__init__(f"{where + ': ' if where else ''}{text} ({status}): {message}")

    def __reduce__(self):
        return (type(self), (self.status, self.message, self.where))


class InvalidArgument(CosyError, ValueError):
    status = _capi.ERR_INVALID_ARG


class StructSizeError(CosyError):
    status = _capi.ERR_STRUCT_SIZE


class OutOfMemory(CosyError, MemoryError):
    status = _capi.ERR_NO_MEMORY


class GpuOutOfMemory(CosyError):
    status = _capi.ERR_GPU_NO_MEMORY


class CudaError(CosyError):
    status = _capi.ERR_CUDA


class DeviceLost(CosyError):
    """Sticky CUDA error: the engine must be destroyed."""
    status = _capi.ERR_DEVICE_LOST


class IOError_(CosyError, OSError):
    status = _capi.ERR_IO


class ModelFormatError(CosyError):
    status = _capi.ERR_MODEL_FORMAT


class ModelVersionError(CosyError):
    status = _capi.ERR_MODEL_VERSION


class Unsupported(CosyError):
    status = _capi.ERR_UNSUPPORTED


class Cancelled(CosyError):
    status = _capi.ERR_CANCELLED


class Timeout(CosyError, TimeoutError):
    """Nothing arrived in time; the request continues."""
    status = _capi.ERR_TIMEOUT


class QueueFull(CosyError):
    status = _capi.ERR_QUEUE_FULL


class TextError(CosyError, ValueError):
    """Invalid UTF-8, or nothing to say after normalization."""
    status = _capi.ERR_TEXT


class InternalError(CosyError):
    status = _capi.ERR_INTERNAL


BY_STATUS = {c.status: c for c in (InvalidArgument, StructSizeError, OutOfMemory, GpuOutOfMemory,
                                   CudaError, DeviceLost, IOError_, ModelFormatError,
                                   ModelVersionError, Unsupported, Cancelled, Timeout, QueueFull,
                                   TextError, InternalError)}


def error_for(status, message="", where=""):
    """The exception for a status code (CosyError itself for a code this package does not know)."""
    return BY_STATUS.get(status, CosyError)(status, message, where)


def check(status, where):
    """Raise the typed exception when status is not COSY_OK (reads cosy_last_error() at once, on
    this thread, as the header asks)."""
    if status != _capi.OK:
        raise error_for(status, _capi.last_error(), where)
