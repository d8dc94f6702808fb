"""Limits on what one HTTP client may cost the server: the time to send a request, the size of
its body, and the engine work of a client that has gone.

- Read timeout (`read_timeout` seconds, default 10): a request's head must arrive within that
  time of the connection opening or of the previous response on it (`timed_protocol`, a
  subclass of uvicorn's HTTP protocol: uvicorn itself waits for a head forever), and its body
  within that time of its head (`BodyLimits`). A client that sends one byte every few seconds is
  answered 408 and disconnected.
- Body size (`max_body_bytes`, default 1 MiB): a Content-Length above it is answered 413 before
  anything is read; a chunked body is counted as it arrives and refused the moment it passes.
  A route may have its own limit: POST /v1/voices max_upload_bytes (a recording), POST
  /v1/audio/speech max_upload_bytes too, of which all but max_body_bytes must be a reference
  recording (app.py checks that once the body is read).
- Client gone: `wait_disconnect` returns when the client closes its connection, so that the
  speech endpoint can cancel the engine request at once, whether the request is still being
  prepared, waits in the engine's queue, or streams (see app.py).
"""
import asyncio
import contextvars
import json

from .errors import ApiError

# the connection (timed protocol instance) whose data created the current request's task: set by
# TimedProtocol.data_received just before uvicorn parses the data and creates the task, which
# copies the context (so BodyLimits finds its connection without looking at addresses)
_CONNECTION = contextvars.ContextVar("cosyvoice_server_connection", default=None)

DEFAULT_READ_TIMEOUT = 10.0
DEFAULT_MAX_BODY_BYTES = 1 << 20
# POST /v1/voices, and a speech request with a reference recording: a WAV of 30 s at 48 kHz,
# 16-bit, in base64 (about 3.9 MB), with room
DEFAULT_MAX_UPLOAD_BYTES = 16 << 20


def _error_body(status, message, code):
    return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": code}}).encode()


def timed_protocol(base, read_timeout):
    """A subclass of uvicorn's HTTP protocol class `base` (h11 or httptools) that closes a
    connection whose request head has not arrived read_timeout seconds after the connection
    opened or its previous response ended (408 when part of a head came, else just closed)."""

    class TimedProtocol(base):
        def connection_made(self, transport):
            self._cosy_transport = transport
            self._cosy_timer = None
            self._cosy_bytes = False
            self._cosy_cycle = None
            super().connection_made(transport)
            self.cosy_arm()

        def data_received(self, data):
            self._cosy_bytes = True
            _CONNECTION.set(self)
            super().data_received(data)

        def connection_lost(self, exc):
            self.cosy_disarm()
            super().connection_lost(exc)

        # ---- called by BodyLimits (on the event loop) ----
        def cosy_arm(self):
            """Start waiting for a request head."""
            self.cosy_disarm()
            self._cosy_bytes = False
            # uvicorn makes a new request cycle (`cycle`) when a whole head has been parsed
            self._cosy_cycle = getattr(self, "cycle", None)
            loop = asyncio.get_running_loop()
            self._cosy_timer = loop.call_later(read_timeout, self._cosy_expire)

        def cosy_disarm(self):
            if self._cosy_timer is not None:
                self._cosy_timer.cancel()
                self._cosy_timer = None

        def _cosy_expire(self):
            self._cosy_timer = None
            t = self._cosy_transport
            if t.is_closing():
                return
            # a head parsed since the timer was armed (its task, which disarms the timer, not yet
            # run: the event loop ran the data first and this expiry right after, as after a
            # stall of the loop): the request has come in time; BodyLimits times its body
            if getattr(self, "cycle", None) is not self._cosy_cycle:
                return
            if self._cosy_bytes:
                body = _error_body(408, f"the request was not received within {read_timeout:g} "
                                   "seconds (read timeout)", "read_timeout")
                t.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                        b"connection: close\r\ncontent-length: " + str(len(body)).encode() +
                        b"\r\n\r\n" + body)
            t.close()

    TimedProtocol.__name__ = TimedProtocol.__qualname__ = "Timed" + base.__name__
    return TimedProtocol


class BodyLimits:
    """ASGI middleware: the body of an HTTP request is at most max_body_bytes and arrives within
    read_timeout seconds of its head; otherwise the receive call raises ApiError (413 or 408,
    'connection: close'), which the app answers in OpenAI's shape. It also tells the connection
    (timed_protocol) when a request head has come and when its response has ended."""

    def __init__(self, app, max_body_bytes=DEFAULT_MAX_BODY_BYTES,
                 read_timeout=DEFAULT_READ_TIMEOUT, per_route=None):
        self.app = app
        self.max_body = int(max_body_bytes)
        self.read_timeout = float(read_timeout)
        # (method, path) -> its own body limit, or (limit, how the 413 message states it)
        self.per_route = dict(per_route or {})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            if scope["type"] == "websocket":   # its head has come; the socket has its own pings
                conn = _CONNECTION.get()
                if conn is not None:
                    conn.cosy_disarm()
            return await self.app(scope, receive, send)
        conn = _CONNECTION.get()
        if conn is not None:
            conn.cosy_disarm()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.read_timeout
        state = {"body_done": False, "received": 0}
        limit = self.per_route.get((scope.get("method"), scope.get("path")), self.max_body)
        limit, says = limit if isinstance(limit, tuple) else (limit, str(limit))
        timeout = self.read_timeout
        close = {"connection": "close"}

        length = None
        for k, v in scope.get("headers", ()):
            if k == b"content-length":
                try:
                    length = int(v)
                except ValueError:
                    length = None
        if length is not None and length > limit:
            err = ApiError(413, f"the request body has {length} bytes; the limit is {says}",
                           code="request_too_large", headers=close)
            await err.response()(scope, receive, send)
            return

        async def limited_receive():
            if state["body_done"]:
                return await receive()
            left = deadline - loop.time()
            try:
                msg = await asyncio.wait_for(receive(), max(left, 0.0))
            except asyncio.TimeoutError:
                raise ApiError(408, f"the request body was not received within {timeout:g} "
                               "seconds (read timeout)", code="read_timeout",
                               headers=close) from None
            if msg["type"] == "http.request":
                state["received"] += len(msg.get("body", b""))
                if state["received"] > limit:
                    raise ApiError(413, f"the request body has more than {limit} bytes; the "
                                   f"limit is {says}",
                                   code="request_too_large", headers=close)
                if not msg.get("more_body", False):
                    state["body_done"] = True
            else:
                state["body_done"] = True
            return msg

        async def tracking_send(msg):
            if (conn is not None and msg["type"] == "http.response.body"
                    and not msg.get("more_body", False)):
                # the next request's head must come in time; armed before the last send, during
                # which uvicorn may start a pipelined request (whose BodyLimits disarms it)
                conn.cosy_arm()
            await send(msg)

        await self.app(scope, limited_receive, tracking_send)


async def wait_disconnect(receive):
    """Return when the client has gone (an 'http.disconnect' message); call it once the request
    body has been read, so that the next message can only be the disconnect."""
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            return
