"""The streaming WebSocket endpoint: text in as it is written, audio out as it is made.

    WebSocket /v1/audio/speech/stream        (docs/websocket.md has the protocol and an example)

A connection is a session: settings once (voice, output format and rate, seed; the voice a name
or a reference recording cloned for the session, refvoice.py), then utterances,
one after the other. The text of an utterance arrives in pieces ("text"), "flush" makes what is
pending spoken now, "end" closes the utterance, "cancel" stops every utterance in flight at once
(barge-in). Each utterance is one engine request in text-streaming mode (COSY_SYNTH_TEXT_STREAM,
Request.push_text), or one per flush: after a flush the next text opens the utterance's next
request, whose audio follows. The audio goes out as soon as the engine makes it, as binary frames
(or base64 in "audio" events when the session says binary: false), in order: an utterance's
audio starts after the previous utterance's has been sent.

Server events (JSON text frames): session, started, audio (base64 mode only), done (samples,
seconds, usage, timings), cancelled (samples sent), error. A bad message gets an error event and
the session goes on; a closed socket cancels everything in flight.

Limits: a message at most max_body_bytes (the HTTP body limit), or max_upload_bytes for a
session message whose reference recording makes up the rest; a text piece and an utterance's
whole text at most max_input_chars each; no NUL or lone surrogate in any string; an utterance
that gets no message for ws_idle_timeout seconds (30) is ended, so that a client that stalls does
not hold an engine request; uvicorn's pings (every 20 s) close a socket whose peer has vanished;
at most MAX_OPEN_UTTERANCES utterances in flight per session, MAX_REQUESTS_PER_UTTERANCE
flushes each (429 error events).
"""
import asyncio
import base64
import json
import logging
import time

import cosyvoice

from . import encoders
from .errors import ApiError, engine_error
from .refvoice import is_reference, oversize, parse_reference

log = logging.getLogger("cosyvoice.server")

FORMATS = ("pcm", "mulaw", "alaw")
MESSAGE_TYPES = ("session", "text", "flush", "end", "cancel")
# utterances (and engine requests: one per utterance, one more per flush) a session may have in
# flight: one connection cannot fill the engine's queue
MAX_OPEN_UTTERANCES = 4
MAX_REQUESTS_PER_UTTERANCE = 16
SESSION_KEYS = ("voice", "response_format", "sample_rate", "seed", "binary", "model")


class SessionVoice:
    """A session's voice cloned from a reference recording (refvoice.py): the Voice, and the
    SHA-256 key the session event shows in place of the recording."""

    def __init__(self, voice, key):
        self.voice, self.key = voice, key


def encode(fmt, chunk):
    """A chunk in the session's format (pcm, mulaw or alaw)."""
    return encoders.encode_raw(fmt, chunk)


class Utterance:
    """One utterance: its engine requests in order (a new one after each flush), the audio
    pump that sends them, and what was sent."""

    def __init__(self, uid, settings):
        self.id = uid
        self.settings = dict(settings)
        self.queue = asyncio.Queue()   # Requests, then None after end
        self.requests = []             # every request, for cancel
        self.current = None            # the request that takes text now
        self.chars = 0
        self.samples = 0
        self.cancelled = False
        self.ended = False
        self.task = None
        self.t0 = time.monotonic()
        self.t_first = None
        self.usage = {"input_tokens": 0, "output_tokens": 0}


class Session:
    """One WebSocket connection: its settings, its utterances in flight, and the lock that keeps
    its outgoing messages whole."""

    def __init__(self, ws, st, settings):
        self.ws, self.st, self.cfg = ws, st, settings
        self.lock = asyncio.Lock()
        self.settings = {"voice": None, "response_format": "pcm", "sample_rate": 24000,
                         "seed": None, "binary": True}
        self.open = []   # utterances not finished
        self.current = None
        self.next_id = 1
        self.last_task = None
        self.closed = False

    # ---- sending ----
    async def send_json(self, obj):
        async with self.lock:
            await self.ws.send_text(json.dumps(obj))

    async def send_audio(self, u, data):
        async with self.lock:
            if u.cancelled:
                return
            if u.settings["binary"]:
                await self.ws.send_bytes(data)
            else:
                await self.ws.send_text(json.dumps({"type": "audio", "utterance": u.id,
                                                    "audio": base64.b64encode(data).decode()}))

    async def error(self, message, code, param=None, utterance=None):
        ev = {"type": "error", "error": {"message": message, "type": "invalid_request_error",
                                         "param": param, "code": code}}
        if utterance is not None:
            ev["utterance"] = utterance
        await self.send_json(ev)

    # ---- messages ----
    def check_string(self, field, value, limit):
        from .app import check_text
        if not isinstance(value, str):
            raise ApiError(400, f"{field} must be a string", param=field, code="invalid_type")
        check_text(field, value, limit)

    async def on_session(self, msg):
        from .app import MAX_NAME_CHARS, voice_name_of
        unknown = sorted(set(msg) - set(SESSION_KEYS) - {"type"})
        if unknown:
            raise ApiError(400, f"unrecognized session setting: {unknown[0]} (known: "
                           f"{', '.join(SESSION_KEYS)})", param=unknown[0], code="extra_forbidden")
        new = dict(self.settings)
        if "model" in msg:
            self.check_string("model", msg["model"], MAX_NAME_CHARS)
            if msg["model"] not in self.cfg.model_names:
                raise ApiError(404, f"the model {msg['model']!r} does not exist",
                               param="model", code="model_not_found")
        ref = None
        if "voice" in msg:
            if is_reference(msg["voice"]):   # cloned below, once the other settings are good
                ref = await asyncio.to_thread(parse_reference, msg["voice"],
                                              self.cfg.max_instructions_chars)
            else:
                name = voice_name_of(msg["voice"])
                self.check_string("voice", name, MAX_NAME_CHARS)
                new["voice"] = name
        if "response_format" in msg:
            if msg["response_format"] not in FORMATS:
                raise ApiError(400, f"response_format {msg['response_format']!r} is not one of "
                               f"{', '.join(FORMATS)}", param="response_format",
                               code="invalid_value")
            new["response_format"] = msg["response_format"]
        if "sample_rate" in msg:
            r = msg["sample_rate"]
            if not isinstance(r, int) or isinstance(r, bool) or not 8000 <= r <= 48000:
                raise ApiError(400, f"sample_rate {r!r} is not an integer in 8000 .. 48000",
                               param="sample_rate", code="invalid_value")
            new["sample_rate"] = r
        if "seed" in msg:
            s = msg["seed"]
            if s is not None and (not isinstance(s, int) or isinstance(s, bool)
                                  or not 0 <= s < 2**64):
                raise ApiError(400, f"seed {s!r} is not an integer in 0 .. 2^64-1", param="seed",
                               code="invalid_value")
            new["seed"] = s
        if "binary" in msg:
            if not isinstance(msg["binary"], bool):
                raise ApiError(400, "binary must be true or false", param="binary",
                               code="invalid_value")
            new["binary"] = msg["binary"]
        if ref is not None:   # the session's own voice: utterances keep the one they started with
            new["voice"] = SessionVoice(await self.st.refs.get(ref), ref.key)
        elif isinstance(new["voice"], str):
            await asyncio.to_thread(self.st.voices.get, new["voice"])   # 400 when unknown
        self.settings = new
        shown = dict(self.settings)
        if isinstance(shown["voice"], SessionVoice):
            shown["voice"] = {"reference": shown["voice"].key}
        await self.send_json({"type": "session", **shown})

    async def submit(self, u):
        s = u.settings
        if isinstance(s["voice"], SessionVoice):
            voice = s["voice"].voice
        else:
            voice = await asyncio.to_thread(self.st.voices.get, s["voice"])
        kw = {"sample_rate": s["sample_rate"] if s["sample_rate"] != 24000 else 0}
        if s["seed"] is not None:
            kw["seed"] = s["seed"]
        try:
            r = await asyncio.to_thread(self.st.engine.submit_text_stream, voice, None, **kw)
        except cosyvoice.CosyError as e:
            raise engine_error(e) from None
        if u.cancelled:   # a cancel came while it was submitted
            r.close()
            return None
        u.requests.append(r)
        u.current = r
        u.queue.put_nowait(r)
        return r

    async def on_text(self, msg):
        text = msg.get("text")
        self.check_string("text", text, self.cfg.max_input_chars)
        if not text:
            return
        u = self.current
        if u is None:
            if self.settings["voice"] is None:
                raise ApiError(400, 'no voice: send {"type": "session", "voice": NAME} first',
                               param="voice", code="missing")
            if len(self.open) >= MAX_OPEN_UTTERANCES:
                raise ApiError(429, f"{len(self.open)} utterances of this session are in flight; "
                               f"the limit is {MAX_OPEN_UTTERANCES} (wait for a done)",
                               code="too_many_utterances")
            u = self.start_utterance()
        if u.chars + len(text) > self.cfg.max_input_chars:
            raise ApiError(400, f"the utterance's text would have {u.chars + len(text)} "
                           f"characters; the limit is {self.cfg.max_input_chars} (end it and "
                           "start another)", param="text", code="string_above_max_length")
        r = u.current
        if r is None and len(u.requests) >= MAX_REQUESTS_PER_UTTERANCE:
            raise ApiError(429, f"this utterance has {len(u.requests)} engine requests (one per "
                           f"flush); the limit is {MAX_REQUESTS_PER_UTTERANCE}: end it",
                           code="too_many_flushes")
        if r is None:
            try:
                r = await self.submit(u)
            except ApiError:
                if not u.requests:   # nothing of it runs: it ends here (cancelled)
                    self.cancel_utterance(u)
                    self.current = None
                raise
            if r is None:
                return
        try:
            await asyncio.to_thread(r.push_text, text)
        except cosyvoice.CosyError as e:
            raise engine_error(e) from None
        u.chars += len(text)

    def start_utterance(self):
        u = Utterance(self.next_id, self.settings)
        self.next_id += 1
        self.current = u
        self.open.append(u)
        prev = self.last_task
        u.task = asyncio.ensure_future(self.pump(u, prev))
        self.last_task = u.task
        return u

    async def end_current_request(self, u):
        r, u.current = u.current, None
        if r is not None:
            try:
                await asyncio.to_thread(r.end_text)
            except cosyvoice.CosyError as e:
                raise engine_error(e) from None

    async def on_flush(self, msg):
        if self.current is not None:
            await self.end_current_request(self.current)

    async def on_end(self, msg):
        u = self.current
        if u is None:
            u = self.start_utterance()
        self.current = None
        u.ended = True
        await self.end_current_request(u)
        u.queue.put_nowait(None)

    async def on_cancel(self, msg=None):
        for u in list(self.open):
            self.cancel_utterance(u)
        self.current = None

    def cancel_utterance(self, u):
        """Stop u at once: no audio of it is sent after this; its engine requests are cancelled
        (and released when their reader ends); its pump reports "cancelled"."""
        if u.cancelled:
            return
        u.cancelled = True
        for r in u.requests:
            r.cancel()
        u.queue.put_nowait(None)
        if u.task is not None and not u.task.done() and u.task is not asyncio.current_task():
            u.task.cancel()

    # ---- audio ----
    async def pump(self, u, prev):
        """Send u's audio once the previous utterance's is out; then done, cancelled or error."""
        rate = u.settings["sample_rate"]
        try:
            if prev is not None:
                await asyncio.wait({prev})
            await self.play(u)
        except asyncio.CancelledError:
            if self.closed or not u.cancelled:
                raise
        except cosyvoice.CosyError as e:
            if not u.cancelled:   # (Cancelled after a cancel is the cancel itself)
                u.cancelled = True
                for r in u.requests:
                    r.cancel()
                await self.send_json({"type": "error", "utterance": u.id,
                                      "error": engine_error(e).body()["error"]})
                return
        except Exception:   # the socket went away under a send: close() cancels the rest
            if not self.closed:
                log.exception("utterance %d failed", u.id)
            return
        finally:
            for r in u.requests:
                r.close_when_idle()
            if u in self.open:
                self.open.remove(u)
            self.st.audio_s.inc(by=u.samples / rate)
        if u.cancelled:
            self.st.cancelled.inc()
            await self.send_json({"type": "cancelled", "utterance": u.id, "samples": u.samples,
                                  "seconds": u.samples / rate})

    async def play(self, u):
        fmt = u.settings["response_format"]
        rate = u.settings["sample_rate"]
        await self.send_json({"type": "started", "utterance": u.id})
        while not u.cancelled:
            r = await u.queue.get()
            if r is None:
                break
            async for c in r.achunks():
                if u.cancelled:
                    break
                if u.t_first is None:
                    u.t_first = time.monotonic()
                    self.st.ttfb.observe(u.t_first - u.t0)
                u.samples += c.size
                await self.send_audio(u, encode(fmt, c))
            if not u.cancelled:
                rs = r.stats()
                u.usage["input_tokens"] += rs.n_text_tokens
                u.usage["output_tokens"] += rs.n_speech_tokens
        if u.cancelled:
            return
        usage = dict(u.usage, total_tokens=u.usage["input_tokens"] + u.usage["output_tokens"])
        await self.send_json({
            "type": "done", "utterance": u.id, "samples": u.samples, "seconds": u.samples / rate,
            "usage": usage,
            "timings": {"first_audio_s": None if u.t_first is None else u.t_first - u.t0,
                        "total_s": time.monotonic() - u.t0}})

    async def close(self):
        """The socket is gone: cancel everything; the pumps end at once."""
        self.closed = True
        await self.on_cancel()


async def serve(ws, st, settings):
    """The session of one WebSocket connection (app.py routes /v1/audio/speech/stream here)."""
    from starlette.websockets import WebSocketDisconnect
    await ws.accept()
    if st.device_lost:
        await ws.send_text(json.dumps({"type": "error", "error": ApiError(
            500, f"the GPU was lost: {st.device_lost}", code="device_lost").body()["error"]}))
        await ws.close(1011)
        return
    sess = Session(ws, st, settings)
    handlers = {"session": sess.on_session, "text": sess.on_text, "flush": sess.on_flush,
                "end": sess.on_end, "cancel": sess.on_cancel}
    idle = settings.ws_idle_timeout
    try:
        while True:
            if sess.current is not None:   # an utterance waits for text: not forever
                try:
                    m = await asyncio.wait_for(ws.receive(), idle)
                except asyncio.TimeoutError:
                    u = sess.current
                    await sess.on_end({})
                    await sess.send_json({"type": "error", "utterance": u.id, "error": ApiError(
                        408, f"no message for {idle:g} s while the utterance was open: it was "
                        "ended (its text so far is spoken)", code="idle_timeout").body()["error"]})
                    continue
            else:
                m = await ws.receive()
            if m["type"] == "websocket.disconnect":
                break
            if m.get("text") is None:
                await sess.error("binary messages are not understood: send JSON text messages",
                                 "invalid_message")
                continue
            raw = m["text"]
            # above max_body_bytes only a session message's reference recording may take it up
            # to max_upload_bytes (refvoice.oversize); a message that large is parsed off the loop
            big = len(raw) > settings.max_body_bytes
            try:
                msg = await asyncio.to_thread(json.loads, raw) if big else json.loads(raw)
            except (ValueError, RecursionError) as e:
                if not big:
                    await sess.error(f"the message is not valid JSON: {e}", "invalid_json")
                    continue
                msg = None
            if big and oversize(len(raw), msg if isinstance(msg, dict) and
                                msg.get("type") == "session" else None,
                                settings.max_body_bytes, settings.max_upload_bytes):
                await sess.error(f"a message of {len(raw)} characters; the limit is "
                                 f"{settings.max_body_bytes} (and {settings.max_upload_bytes} for "
                                 "a session message with a reference recording)",
                                 "message_too_large")
                continue
            if not isinstance(msg, dict) or msg.get("type") not in MESSAGE_TYPES:
                t = msg.get("type") if isinstance(msg, dict) else None
                await sess.error(f"unknown message type {t!r}; expected one of "
                                 f"{', '.join(MESSAGE_TYPES)}", "invalid_message", "type")
                continue
            try:
                await handlers[msg["type"]](msg)
            except ApiError as e:
                err = e.body()["error"]
                await sess.send_json({"type": "error", "error": err})
    except WebSocketDisconnect:
        pass
    finally:
        await sess.close()
