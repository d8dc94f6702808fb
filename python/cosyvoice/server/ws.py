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

Server events (JSON text frames): session, started, audio (base64 mode only), mark (where the
speech for a text piece can start: the library's text marks, Request.text_marks, sent in order
with the audio), done (samples, seconds, pieces, marks, usage, timings), cancelled (samples and
marks sent), error. A bad message gets an error event and
the session goes on; a closed socket cancels everything in flight.

With "protocol": "twilio" (a session setting) the output is Twilio's media-stream messages
(media events of base64 mu-law at 8 kHz, frame_ms each, and Twilio marks), and Twilio's clear
(a barge-in) and mark (echoed where the audio for the text before it ends, placed with the
library's text marks) come in: docs/websocket.md.

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
PROTOCOLS = ("cosyvoice", "twilio")
TWILIO_EVENTS = ("clear", "mark")   # Twilio media-stream messages the twilio protocol takes
# utterances (and engine requests: one per utterance, one more per flush) a session may have in
# flight: one connection cannot fill the engine's queue
MAX_OPEN_UTTERANCES = 4
MAX_REQUESTS_PER_UTTERANCE = 16
MAX_MARK_NAME_CHARS = 256
SESSION_KEYS = ("voice", "response_format", "sample_rate", "seed", "binary", "model",
                "max_tokens", "protocol", "stream_sid", "frame_ms")


def int_setting(msg, new, key, lo, hi, shown, nullable=False):
    """A session message's integer setting: msg[key], when present, into new[key] if it is an
    integer (not a bool) in lo .. hi, or None where nullable; else a 400 naming it (shown: the
    range as the error says it)."""
    if key not in msg:
        return
    v = msg[key]
    if not (v is None and nullable) and (not isinstance(v, int) or isinstance(v, bool)
                                         or not lo <= v <= hi):
        raise ApiError(400, f"{key} {v!r} is not an integer in {shown}", param=key,
                       code="invalid_value")
    new[key] = v


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
        self.pieces = []               # per request: its text pieces (Piece), in order
        self.current = None            # the request that takes text now
        self.req_bytes = 0             # UTF-8 bytes pushed into the current request
        self.n_pieces = 0              # text pieces of the utterance
        self.n_marks = 0               # mark events sent
        self.chars = 0
        self.samples = 0
        self.between = []              # Twilio marks to send before the next request's audio
        self.finished = False          # its last event is being sent: nothing more joins it
        self.twbuf = b""               # twilio protocol: audio bytes not yet in a media frame
        self.cancelled = False
        self.ended = False
        self.task = None
        self.t0 = time.monotonic()
        self.t_first = None
        self.usage = {"input_tokens": 0, "output_tokens": 0}


class Piece:
    """A client text piece: its index in the utterance, its characters [c0, c1) of the
    utterance's text, and where its bytes start in its engine request's text (marks)."""
    __slots__ = ("index", "c0", "c1", "b0")

    def __init__(self, index, c0, c1, b0):
        self.index, self.c0, self.c1, self.b0 = index, c0, c1, b0


class TwilioMark:
    """A Twilio mark the client sent: echoed in the output stream where the audio for the text
    sent before it ends (Session.on_event)."""
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name


def piece_sample(p, marks):
    """The request's sample where speech for piece p can start: the mark of the unit (sentence
    or word of the library's text streaming, Request.text_marks) that holds its first byte; None
    while that unit is not committed or not fed yet."""
    lo, hi = 0, len(marks)
    while lo < hi:   # the first unit that ends after the piece's first byte
        mid = (lo + hi) // 2
        if marks[mid].text_end <= p.b0:
            lo = mid + 1
        else:
            hi = mid
    if lo == len(marks) or marks[lo].text_begin > p.b0 or marks[lo].sample < 0:
        return None
    return marks[lo].sample


class Session:
    """One WebSocket connection: its settings, its utterances in flight, and the lock that keeps
    its outgoing messages whole."""

    def __init__(self, ws, st, settings):
        self.ws, self.st, self.cfg = ws, st, settings
        self.lock = asyncio.Lock()
        self.settings = {"voice": None, "response_format": "pcm", "sample_rate": 24000,
                         "seed": None, "binary": True, "max_tokens": None,
                         "protocol": "cosyvoice", "stream_sid": None, "frame_ms": 20}
        self.open = []   # utterances not finished
        self.current = None
        self.next_id = 1
        self.last_task = None
        self.closed = False

    # ---- sending ----
    async def send_json(self, obj):
        async with self.lock:
            await self.ws.send_text(json.dumps(obj))

    async def send_audio(self, u, data, n):
        """Send n samples of u's audio (data, encoded); u.samples counts what was sent."""
        if u.settings["protocol"] == "twilio":   # media events of frame_ms each
            u.twbuf += data
            u.samples += n     # (less what is held for a frame when cancelled: pump)
            frame = 8 * u.settings["frame_ms"]
            while len(u.twbuf) >= frame and not u.cancelled:
                head, u.twbuf = u.twbuf[:frame], u.twbuf[frame:]
                if not await self.send_media(u, head):
                    u.samples -= len(head)
            return
        async with self.lock:
            if u.cancelled:
                return
            u.samples += n
            if u.settings["binary"]:
                await self.ws.send_bytes(data)
            else:
                await self.ws.send_text(json.dumps({"type": "audio", "utterance": u.id,
                                                    "audio": base64.b64encode(data).decode()}))

    async def send_media(self, u, data):
        """Twilio protocol: one media event, as Twilio takes it (base64 raw mu-law 8 kHz)."""
        async with self.lock:
            if u.cancelled:
                return False
            await self.ws.send_text(json.dumps({
                "event": "media", "streamSid": u.settings["stream_sid"],
                "media": {"payload": base64.b64encode(data).decode()}}))
            return True

    async def flush_audio(self, u):
        """Twilio protocol: the audio held for a whole frame goes out now (before a mark, at the
        end of an utterance): the last frame before a mark may be shorter."""
        if u.twbuf and not u.cancelled:
            data, u.twbuf = u.twbuf, b""
            if not await self.send_media(u, data):
                u.samples -= len(data)

    async def send_twilio_mark(self, u, m):
        if u is not None:
            await self.flush_audio(u)
            if u.cancelled:
                return
        await self.send_json({"event": "mark", "streamSid": self.settings["stream_sid"]
                              if u is None else u.settings["stream_sid"],
                              "mark": {"name": m.name}})

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
        if "protocol" in msg:
            if msg["protocol"] not in PROTOCOLS:
                raise ApiError(400, f"protocol {msg['protocol']!r} is not one of "
                               f"{', '.join(PROTOCOLS)}", param="protocol", code="invalid_value")
            new["protocol"] = msg["protocol"]
            if new["protocol"] == "twilio":   # what Twilio takes: base64 mu-law at 8 kHz
                # (the keys below may only repeat these)
                new.update(response_format="mulaw", sample_rate=8000, binary=False)
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
        int_setting(msg, new, "sample_rate", 8000, 48000, "8000 .. 48000")
        int_setting(msg, new, "seed", 0, 2**64 - 1, "0 .. 2^64-1", nullable=True)
        int_setting(msg, new, "max_tokens", 1, 2**31 - 1, "1 .. 2^31-1", nullable=True)
        if "binary" in msg:
            if not isinstance(msg["binary"], bool):
                raise ApiError(400, "binary must be true or false", param="binary",
                               code="invalid_value")
            new["binary"] = msg["binary"]
        if "stream_sid" in msg:
            sid = msg["stream_sid"]
            if sid is not None:
                self.check_string("stream_sid", sid, MAX_NAME_CHARS)
            new["stream_sid"] = sid
        int_setting(msg, new, "frame_ms", 20, 50, "20 .. 50")
        if new["protocol"] == "twilio":
            for k, v in (("response_format", "mulaw"), ("sample_rate", 8000), ("binary", False)):
                if new[k] != v:
                    raise ApiError(400, f"protocol twilio sends {k} {v!r} (Twilio's media "
                                   f"format), not {new[k]!r}", param=k, code="invalid_value")
            if not new["stream_sid"]:
                raise ApiError(400, "protocol twilio needs stream_sid (the streamSid of Twilio's "
                               "start message, put in every media and mark event)",
                               param="stream_sid", code="missing")
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
        if s["max_tokens"] is not None:
            kw["max_tokens"] = s["max_tokens"]
        try:
            r = await asyncio.to_thread(self.st.engine.submit_text_stream, voice, None, **kw)
        except cosyvoice.CosyError as e:
            raise engine_error(e) from None
        if u.cancelled:   # a cancel came while it was submitted
            r.close()
            return None
        u.requests.append(r)
        u.pieces.append([])
        u.req_bytes = 0
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
        u.pieces[u.requests.index(r)].append(Piece(u.n_pieces, u.chars, u.chars + len(text),
                                                   u.req_bytes))
        u.n_pieces += 1
        u.req_bytes += len(text.encode())
        u.chars += len(text)

    async def on_event(self, msg):
        """A Twilio media-stream message (twilio protocol): clear = cancel (and a clear event in
        the output, for Twilio's buffer); mark = echoed in the output where the audio for the
        text sent before it ends (docs/websocket.md)."""
        if self.settings["protocol"] != "twilio":
            raise ApiError(400, f"a Twilio {msg['event']!r} event, but the session's protocol is "
                           'not twilio (send {"type": "session", "protocol": "twilio", '
                           '"stream_sid": ...} first)', param="event", code="invalid_message")
        sid = msg.get("streamSid")
        if sid is not None and sid != self.settings["stream_sid"]:
            raise ApiError(400, f"streamSid {sid!r} is not the session's stream_sid",
                           param="streamSid", code="invalid_value")
        if msg["event"] == "clear":
            await self.on_cancel()
            await self.send_json({"event": "clear", "streamSid": self.settings["stream_sid"]})
            return
        mark = msg.get("mark")
        name = mark.get("name") if isinstance(mark, dict) else None
        self.check_string("mark.name", name, MAX_MARK_NAME_CHARS)
        m = TwilioMark(name)
        u = self.current
        if u is not None and u.current is not None:   # text of an open request before it
            u.pieces[u.requests.index(u.current)].append(m)
        elif u is not None:                            # between two requests of u
            u.between.append(m)
        elif self.open and not self.open[-1].finished:   # after everything in flight
            self.open[-1].between.append(m)
        else:                                          # nothing in flight: at once
            await self.send_twilio_mark(None, m)

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
                u.finished = True
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
            u.samples -= len(u.twbuf)   # (twilio: held for a frame, never sent)
            u.twbuf = b""
            self.st.audio_s.inc(by=u.samples / rate)
        if u.cancelled:
            self.st.cancelled.inc()
            u.finished = True
            dropped = [m.name for m in u.between] + [
                m.name for ps in u.pieces for m in ps if isinstance(m, TwilioMark)]
            ev = {"type": "cancelled", "utterance": u.id, "samples": u.samples,
                  "seconds": u.samples / rate, "pieces": u.n_pieces, "marks": u.n_marks}
            if u.settings["protocol"] == "twilio":
                ev["dropped_marks"] = dropped
            await self.send_json(ev)

    async def send_marks(self, u, r, pending, base, upto):
        """Send the mark events of the pieces (pending, in order) whose speech can start at or
        before request sample upto (None: all of them, at the end of the request's audio);
        base: the utterance's samples before this request. Returns the request sample of the
        next piece's mark when known (and > upto), else None."""
        rate = u.settings["sample_rate"]
        marks = None
        while pending and not u.cancelled:
            if isinstance(pending[0], TwilioMark):
                # where speech for the text after it can start (the next piece's mark), or the
                # end of the request's audio when no text follows in this request
                nxt = next((p for p in pending if isinstance(p, Piece)), None)
                if nxt is None and upto is not None:
                    return None
                if nxt is not None:
                    if marks is None:
                        marks = r.text_marks()
                    at = piece_sample(nxt, marks)
                    if at is None or (upto is not None and at > upto):
                        return at
                await self.send_twilio_mark(u, pending.pop(0))
                continue
            if marks is None:
                marks = r.text_marks()
            at = piece_sample(pending[0], marks)
            if at is None or (upto is not None and at > upto):
                return at
            p = pending.pop(0)
            await self.flush_audio(u)
            await self.send_json({"type": "mark", "utterance": u.id, "piece": p.index,
                                  "text_begin": p.c0, "text_end": p.c1, "sample": base + at,
                                  "ms": (base + at) * 1000 / rate})
            u.n_marks += 1
        return None

    async def play(self, u):
        fmt = u.settings["response_format"]
        rate = u.settings["sample_rate"]
        await self.send_json({"type": "started", "utterance": u.id})
        while not u.cancelled:
            r = await u.queue.get()
            if r is None:
                break
            # the marks go out in order with the audio: a piece's mark right after the audio
            # before its sample (a chunk is cut there), so that everything sent before a mark
            # was made without that piece's text (docs/websocket.md)
            while u.between and not u.cancelled:   # Twilio marks after the previous request
                await self.send_twilio_mark(u, u.between.pop(0))
            pending = u.pieces[u.requests.index(r)]
            base, pos = u.samples, 0
            async for c in r.achunks():
                if u.cancelled:
                    break
                if u.t_first is None:
                    u.t_first = time.monotonic()
                    self.st.ttfb.observe(u.t_first - u.t0)
                while True:
                    at = await self.send_marks(u, r, pending, base, pos)
                    if u.cancelled or at is None or at >= pos + c.size:
                        break
                    head, c = c[:at - pos], c[at - pos:]
                    pos += head.size
                    await self.send_audio(u, encode(fmt, head), head.size)
                if u.cancelled:
                    break
                pos += c.size
                await self.send_audio(u, encode(fmt, c), c.size)
            if not u.cancelled:
                await self.send_marks(u, r, pending, base, None)
            if not u.cancelled:
                rs = r.stats()
                u.usage["input_tokens"] += rs.n_text_tokens
                u.usage["output_tokens"] += rs.n_speech_tokens
        await self.flush_audio(u)
        while u.between and not u.cancelled:
            await self.send_twilio_mark(u, u.between.pop(0))
        if u.cancelled:
            return
        u.finished = True
        usage = dict(u.usage, total_tokens=u.usage["input_tokens"] + u.usage["output_tokens"])
        await self.send_json({
            "type": "done", "utterance": u.id, "samples": u.samples, "seconds": u.samples / rate,
            "pieces": u.n_pieces, "marks": u.n_marks, "usage": usage,
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
            if isinstance(msg, dict) and "type" not in msg and msg.get("event") in TWILIO_EVENTS:
                try:
                    await sess.on_event(msg)
                except ApiError as e:
                    await sess.send_json({"type": "error", "error": e.body()["error"]})
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
