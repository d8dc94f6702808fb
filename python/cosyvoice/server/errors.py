"""Errors of the speech server in OpenAI's shape:
{"error": {"message", "type", "param", "code"}}."""
import cosyvoice


class ApiError(Exception):
    """An error answered in OpenAI's shape. type is "invalid_request_error" for 4xx and
    "server_error" for 5xx unless given."""

    def __init__(self, status, message, type_=None, param=None, code=None, headers=None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type_ or ("invalid_request_error" if status < 500 else "server_error")
        self.headers = headers

    def body(self):
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self):
        from fastapi.responses import JSONResponse
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def engine_error(e):
    """ApiError for a library failure (typed cosyvoice errors)."""
    if isinstance(e, cosyvoice.TextError):
        return ApiError(400, e.message, param="input", code="invalid_text")
    if isinstance(e, cosyvoice.Unsupported):
        return ApiError(400, f"not supported here: {e.message}", code="unsupported")
    if isinstance(e, cosyvoice.InvalidArgument):
        return ApiError(400, e.message, code="invalid_value")
    if isinstance(e, cosyvoice.QueueFull):
        return ApiError(503, f"the engine's queue is full: {e.message}", code="queue_full",
                        headers={"Retry-After": "1"})
    if isinstance(e, (cosyvoice.GpuOutOfMemory, cosyvoice.OutOfMemory)):
        return ApiError(503, f"out of memory: {e.message}", code="out_of_memory",
                        headers={"Retry-After": "1"})
    if isinstance(e, cosyvoice.Timeout):
        return ApiError(504, e.message, code="timeout")
    return ApiError(500, f"{e}", code="engine_error")
