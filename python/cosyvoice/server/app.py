"""The OpenAI-compatible speech server's FastAPI app (`create_app`); the command is cli.py.

Endpoints:
  POST /v1/audio/speech   body {model, input, voice, instructions?, response_format?, speed?,
                          stream_format?} as OpenAI's; voice names a voice of this server (the
                          one cloned at startup, or a saved voice VOICES_DIR/NAME.gguf), as a
                          string or {"id": NAME}. Extensions: seed, sample_rate, max_tokens,
                          min_tokens (cosy_synth_params), stream (false: the whole audio in one
                          response with its exact length), and a reference recording as the
                          voice, {"audio": base64 WAV, "text": transcript}: a voice cloned for
                          this request, not saved (refvoice.py; a recent one is cached).
  GET  /v1/models         the model (and its accepted aliases); GET /v1/models/{id} one of them
  GET  /v1/voices         the voices (not an OpenAI endpoint; nor are the next three)
  POST /v1/voices         a voice cloned from a recording and its transcript, kept in the voices
                          folder: JSON {name, transcript, audio: base64 WAV}, or the WAV as the
                          body with ?name=&transcript= (at most max_upload_bytes, 16 MiB)
  GET, DELETE /v1/voices/{name}
  WS   /v1/audio/speech/stream   text in as it is written, audio out as it is made (ws.py)
  GET  /health            200 {"status": "ok", "active", "queued", ...}; 503 after the device
                          was lost
  GET  /metrics           Prometheus text: requests, TTFB histogram, active/queued, memory

Audio: the response starts when the engine's first chunk exists and every later chunk is sent as
it is made (chunked transfer), for wav (a header whose sizes say "unknown length",
0xFFFFFFFF), pcm (16-bit little endian mono), mulaw and alaw (G.711, for phone lines at
sample_rate 8000) and opus; flac and mp3 need the whole utterance
(encoders.py says why). With "stream": false, or a speed other than 1 (the engine makes such
audio in one piece), the response is sent whole, with Content-Length and, for wav, the exact
sizes in its header. stream_format "sse" sends `speech.audio.delta` events (base64 audio in
response_format) and a final `speech.audio.done` with usage (text tokens in, speech tokens out).
speed: OpenAI's 0.25 .. 4.0; stretch.py says how speeds beyond the engine's 0.5 .. 2.0 are made.

Limits (cli.py sets them; none lets one client hold the engine or the server): input at most
max_input_chars (4096, OpenAI's), instructions at most max_instructions_chars (1000), the other
strings at most 256 characters; no string may contain NUL or a lone surrogate; the body at most
max_body_bytes (1 MiB), or max_upload_bytes (16 MiB) when a reference recording makes up the
rest; a request's head and body must arrive within read_timeout seconds (10).
A client that goes away at any moment (while its voice loads or its text is prepared, while its
request waits in the engine's queue, before the first audio or in the middle of the stream) has
its engine request cancelled at once and released at the engine's next step.

Errors use OpenAI's JSON shape {"error": {"message", "type", "param", "code"}}: bad requests 4xx
(malformed JSON and empty bodies included); engine failures 5xx (queue full and out of memory:
503; device lost: 500 and /health turns 503); the server keeps serving.
"""
import asyncio
import base64
import json
import logging
import os
import re
import threading
import time
from typing import Any, Optional

import numpy as np
from fastapi import FastAPI, Request, WebSocket
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

import cosyvoice

from . import encoders
from . import metrics as prom
from .errors import ApiError, engine_error
from .limits import (DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_UPLOAD_BYTES, DEFAULT_READ_TIMEOUT,
                     BodyLimits, wait_disconnect)
from .refvoice import (DEFAULT_CACHE_BYTES, DEFAULT_CACHE_COUNT, DEFAULT_CACHE_TTL,
                       ReferenceVoices, clone, decode, is_reference, oversize, parse_reference)
from .stretch import MAX_SPEED, MIN_SPEED, split_speed, time_stretch

log = logging.getLogger("cosyvoice.server")

VOICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEFAULT_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
# OpenAI's built-in voice names: served with the default voice when no voice has that name here
OPENAI_VOICES = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova",
                 "onyx", "sage", "shimmer", "verse")
TTFB_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
MAX_NAME_CHARS = 256      # model, voice
MAX_KEYWORD_CHARS = 32    # response_format, stream_format


class Settings:
    """What cli.py's options set (see `cosyvoice-server --help`)."""

    def __init__(self, model, voices=None, device=-1, max_active=0, max_queued=0, cpu_threads=0,
                 gpu_memory_fraction=0.0, served_model_name="cosyvoice3",
                 model_aliases=DEFAULT_ALIASES, max_input_chars=4096,
                 default_response_format="mp3", voice_wav=None, voice_text="",
                 voice_name="default", default_voice=None, max_instructions_chars=1000,
                 max_body_bytes=DEFAULT_MAX_BODY_BYTES, read_timeout=DEFAULT_READ_TIMEOUT,
                 max_upload_bytes=DEFAULT_MAX_UPLOAD_BYTES, ws_idle_timeout=30.0,
                 reference_cache_count=DEFAULT_CACHE_COUNT,
                 reference_cache_bytes=DEFAULT_CACHE_BYTES,
                 reference_cache_ttl=DEFAULT_CACHE_TTL):
        self.model, self.voices = model, voices
        self.device, self.max_active, self.max_queued = device, max_active, max_queued
        self.cpu_threads, self.gpu_memory_fraction = cpu_threads, gpu_memory_fraction
        self.served_model_name = served_model_name
        self.model_aliases = tuple(a for a in model_aliases if a)
        self.max_input_chars = max_input_chars
        self.max_instructions_chars = max_instructions_chars
        self.default_response_format = default_response_format
        self.voice_wav, self.voice_text, self.voice_name = voice_wav, voice_text, voice_name
        # the voice OpenAI's built-in names get: the cloned one unless named otherwise
        self.default_voice = default_voice or (voice_name if voice_wav else None)
        self.max_body_bytes, self.read_timeout = max_body_bytes, read_timeout
        self.max_upload_bytes = max_upload_bytes
        self.ws_idle_timeout = ws_idle_timeout
        self.reference_cache_count = reference_cache_count
        self.reference_cache_bytes = reference_cache_bytes
        self.reference_cache_ttl = reference_cache_ttl

    @property
    def model_names(self):
        return (self.served_model_name,) + self.model_aliases


class SpeechRequest(BaseModel):
    """The body of POST /v1/audio/speech (types only; lengths and ranges are checked by
    check_request, with the server's limits)."""
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    model: str
    input: str
    voice: Any        # a name, {"id": name}, or a reference {"audio", "text"} (refvoice.py)
    instructions: Optional[str] = None
    response_format: Optional[str] = None
    speed: float = 1.0
    stream_format: str = "audio"
    # extensions
    stream: Optional[bool] = None
    seed: Optional[int] = Field(default=None, ge=0, lt=2**64)
    sample_rate: Optional[int] = Field(default=None, ge=8000, le=48000)
    max_tokens: Optional[int] = Field(default=None, ge=1, le=2**31 - 1)
    min_tokens: Optional[int] = Field(default=None, ge=1, le=2**31 - 1)


def validation_error(exc):
    """ApiError (400) for the first error of a pydantic ValidationError."""
    errs = exc.errors(include_url=False)
    first = errs[0] if errs else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    param = loc[0] if loc else None
    where = ".".join(loc)
    typ = first.get("type")
    if typ == "extra_forbidden":
        msg = f"unrecognized request argument: {where}"
    elif typ == "missing":
        msg = f"missing required parameter: {where}"
    else:
        msg = f"{where}: {first.get('msg', 'invalid value')}" if where else \
            first.get("msg", "invalid request")
    return ApiError(400, msg, param=param, code=typ)


def parse_speech(raw):
    """SpeechRequest from the raw body; ApiError 400 with a message that says what is wrong."""
    return speech_of(load_json(raw))


def load_json(raw):
    """The JSON object of a request body; ApiError 400 with a message that says what is wrong."""
    if not raw.strip():
        raise ApiError(400, "the request body is empty: send a JSON object such as "
                       '{"model": "tts-1", "input": "Hello.", "voice": "alloy"}',
                       code="empty_body")
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the request body is not UTF-8 JSON: {e.reason} at byte {e.start}",
                       code="invalid_json") from None
    except json.JSONDecodeError as e:
        raise ApiError(400, f"the request body is not valid JSON: {e.msg} at line {e.lineno} "
                       f"column {e.colno} (byte {e.pos})", code="invalid_json") from None
    except (ValueError, RecursionError) as e:   # e.g. an integer of too many digits, deep nesting
        raise ApiError(400, f"the request body is not usable JSON: {e}",
                       code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"the request body must be a JSON object, not {type(data).__name__}"
                       " (" + json.dumps(data)[:40] + ")", code="invalid_json")
    return data


def speech_of(data):
    """SpeechRequest of a JSON object; ApiError 400 naming the first wrong field."""
    try:
        return SpeechRequest.model_validate(data)
    except ValidationError as e:
        raise validation_error(e) from None


def parse_large(raw, settings):
    """parse_speech of a body above max_body_bytes: 413 unless a reference recording (the voice's
    audio) makes up the bytes beyond it (refvoice.oversize)."""
    try:
        data = load_json(raw)
    except ApiError:
        data = None
    why = oversize(len(raw), data, settings.max_body_bytes, settings.max_upload_bytes)
    if why:
        raise ApiError(413, why, code="request_too_large")
    return speech_of(data)


def voice_name_of(voice):
    """The voice name of a request's voice field: a string, or {"id": name}."""
    if isinstance(voice, str):
        return voice
    if isinstance(voice, dict) and set(voice) == {"id"} and isinstance(voice["id"], str):
        return voice["id"]
    raise ApiError(400, 'voice must be a voice name, an object {"id": NAME} or a reference '
                   'recording {"audio": "<base64 WAV>", "text": "its transcript"}; got '
                   + json.dumps(voice)[:60], param="voice", code="invalid_voice")


def check_text(field, value, limit):
    """400 for NUL, lone surrogates and strings above limit characters."""
    if value is None:
        return
    i = value.find("\0")
    if i >= 0:
        raise ApiError(400, f"{field} contains a NUL character (U+0000) at position {i}; text "
                       "may not contain NUL", param=field, code="invalid_text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(400, f"{field} is not valid UTF-8 text: {e.reason} at character "
                       f"{e.start}", param=field, code="invalid_text") from None
    if len(value) > limit:
        raise ApiError(400, f"{field} has {len(value)} characters; the limit is {limit}"
                       + (" (split the text into several requests)" if field == "input" else ""),
                       param=field, code="string_above_max_length")


def check_request(req, settings):
    """The checks of a parsed request that need no engine: (format, voice name; None for a
    reference recording, which _start parses)."""
    name = None if is_reference(req.voice) else voice_name_of(req.voice)
    for field, value, limit in (("model", req.model, MAX_NAME_CHARS),
                                ("voice", name, MAX_NAME_CHARS),
                                ("response_format", req.response_format, MAX_KEYWORD_CHARS),
                                ("stream_format", req.stream_format, MAX_KEYWORD_CHARS),
                                ("instructions", req.instructions, settings.max_instructions_chars),
                                ("input", req.input, settings.max_input_chars)):
        check_text(field, value, limit)
    if req.model not in settings.model_names:
        raise ApiError(404, f"the model {req.model!r} does not exist; this server has "
                       f"{settings.served_model_name!r} (aliases: "
                       f"{', '.join(settings.model_aliases) or 'none'})",
                       param="model", code="model_not_found")
    if not req.input.strip():
        raise ApiError(400, "input is empty", param="input", code="empty_input")
    fmt = req.response_format or settings.default_response_format
    if fmt not in encoders.ALL_FORMATS:
        raise ApiError(400, f"response_format {fmt!r} is not one of "
                       f"{', '.join(encoders.ALL_FORMATS)}", param="response_format",
                       code="invalid_value")
    if req.stream_format not in ("audio", "sse"):
        raise ApiError(400, f"stream_format {req.stream_format!r} is not 'audio' or 'sse'",
                       param="stream_format", code="invalid_value")
    if req.stream is False and req.stream_format == "sse":
        raise ApiError(400, "stream false and stream_format 'sse' contradict each other",
                       param="stream", code="invalid_value")
    if not MIN_SPEED <= req.speed <= MAX_SPEED:
        raise ApiError(400, f"speed {req.speed:g} is outside {MIN_SPEED} .. {MAX_SPEED}",
                       param="speed", code="invalid_value")
    if (req.min_tokens is not None and req.max_tokens is not None
            and req.min_tokens > req.max_tokens):
        raise ApiError(400, "min_tokens is larger than max_tokens", param="min_tokens",
                       code="invalid_value")
    why = encoders.unsupported_reason(fmt, req.sample_rate or 24000)
    if why:
        raise ApiError(400, why, param="response_format", code="unsupported_format")
    return fmt, name


def check_voice_name(name, param="voice"):
    """400 unless name is a valid voice name (VOICE_NAME)."""
    if not isinstance(name, str) or not VOICE_NAME.match(name):
        raise ApiError(400, f"invalid voice name {str(name)[:140]!r}: letters, digits, '.', '_' "
                       "and '-' (at most 128, not starting with a punctuation mark)", param=param,
                       code="invalid_voice")


class Voices:
    """The voices of the server: the one cloned at startup (named settings.voice_name) and the
    saved voices of a directory (NAME.gguf), loaded on first use and kept; a file changed on
    disk is loaded again. OpenAI's built-in names that are not voices here get the default
    voice (settings.default_voice) when there is one."""

    def __init__(self, engine, settings):
        self.engine, self.dir = engine, settings.voices
        self.settings = settings
        self.fixed = {}   # name -> Voice made at startup
        self.cache = {}   # name -> (mtime_ns, Voice)
        self.lock = threading.Lock()

    def file_names(self):
        if not self.dir:
            return []
        try:
            files = os.listdir(self.dir)
        except OSError:
            return []
        return sorted(f[:-5] for f in files if f.endswith(".gguf") and VOICE_NAME.match(f[:-5]))

    def names(self):
        return sorted(set(self.fixed) | set(self.file_names()))

    def close(self):
        with self.lock:
            for v in self.fixed.values():
                v.close()
            for _, v in self.cache.values():
                v.close()
            self.fixed.clear()
            self.cache.clear()

    def create(self, name, wav_bytes, transcript):
        """Clone a voice from a WAV file's bytes and its transcript and save it as
        VOICES_DIR/name.gguf (blocking: run it on a worker thread)."""
        if not self.dir:
            raise ApiError(400, "this server has no voices folder to keep voices in (start it "
                           "with --voices DIR)", code="no_voices_folder")
        check_voice_name(name)
        path = os.path.join(self.dir, name + ".gguf")
        if name in self.fixed or os.path.exists(path):
            raise ApiError(409, f"voice {name!r} exists; delete it first", param="name",
                           code="voice_exists")
        pcm, rate = decode(wav_bytes, "audio")
        v = clone(self.engine, pcm, rate, transcript, "audio", "transcript")
        tmp = path + f".tmp{os.getpid()}.{threading.get_ident()}"
        try:
            v.save(tmp)
            with self.lock:
                if os.path.exists(path):
                    raise ApiError(409, f"voice {name!r} exists; delete it first",
                                   param="name", code="voice_exists")
                os.replace(tmp, path)
                self.cache[name] = (os.stat(path).st_mtime_ns, v)
        except cosyvoice.CosyError as e:
            v.close()
            raise ApiError(500, f"voice {name!r} could not be saved: {e}",
                           code="voice_save_failed") from None
        except BaseException:
            v.close()
            raise
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return name

    def delete(self, name):
        check_voice_name(name)
        if name in self.fixed:
            raise ApiError(400, f"voice {name!r} was made at startup (--voice-wav) and cannot be "
                           "deleted", param="voice", code="voice_fixed")
        path = os.path.join(self.dir, name + ".gguf") if self.dir else None
        with self.lock:
            if not path or not os.path.exists(path):
                raise ApiError(404, f"voice {name!r} not found", param="voice",
                               code="voice_not_found")
            os.unlink(path)
            hit = self.cache.pop(name, None)
        if hit:
            hit[1].close()   # requests using it keep it alive

    def get(self, name):
        """The Voice called name (blocking: run it on a worker thread). ApiError when there is
        no such voice (400) or its file does not load (500)."""
        check_voice_name(name)
        if name in self.fixed:
            return self.fixed[name]
        path = os.path.join(self.dir, name + ".gguf") if self.dir else None
        try:
            mtime = os.stat(path).st_mtime_ns if path else None
        except OSError:
            mtime = None
        if mtime is None:
            d = self.settings.default_voice
            if name in OPENAI_VOICES and d and d != name:
                return self.get(d)
            known = self.names()
            raise ApiError(400, f"voice {name!r} not found; available: "
                           f"{', '.join(known[:50]) or '(none)'}" +
                           (f" and {len(known) - 50} more" if len(known) > 50 else ""),
                           param="voice", code="voice_not_found") from None
        with self.lock:
            hit = self.cache.get(name)
            if hit and hit[0] == mtime:
                return hit[1]
            try:
                v = self.engine.load_voice(path)
            except cosyvoice.CosyError as e:
                raise ApiError(500, f"voice {name!r} could not be loaded: {e}",
                               code="voice_load_failed") from None
            if hit:
                hit[1].close()   # requests using it keep it alive
            self.cache[name] = (mtime, v)
            return v


class State:
    """What the app keeps: settings, engine, voices, device state and the Prometheus series."""

    def __init__(self, settings):
        self.settings = settings
        self.engine = None
        self.voices = None
        self.refs = None   # ReferenceVoices
        self.device_lost = None
        self.requests = prom.Counter("cosyvoice_speech_requests_total",
                                     "speech requests answered, by HTTP status and format",
                                     ("code", "format"))
        self.ttfb = prom.Histogram("cosyvoice_ttfb_seconds",
                                   "request received -> first audio bytes handed to the server",
                                   TTFB_BUCKETS)
        self.audio_s = prom.Counter("cosyvoice_audio_seconds_total", "audio seconds sent")
        self.cancelled = prom.Counter("cosyvoice_client_disconnects_total",
                                      "requests whose client left before the end (request "
                                      "cancelled)")
        self.failed_mid = prom.Counter("cosyvoice_stream_failures_total",
                                       "streams that failed after their first bytes were sent")
        self.in_progress = prom.Gauge("cosyvoice_requests_in_progress",
                                      "speech requests being answered now")
        self.in_progress.set(value=0)
        self.ref_results = prom.Counter(
            "cosyvoice_reference_voices_total", "reference recordings sent with a request, by "
            "what became of them: cloned, cached (a cache hit), joined (waited for the same "
            "recording's clone in progress), failed", ("result",))

    def engine_gauges(self):
        out = []
        if self.engine is None or self.engine.closed:
            return out
        s = self.engine.stats()
        dev = self.settings.device >= 0

        def g(name, help_, value):
            m = prom.Gauge(name, help_)
            m.set(value=value)
            out.append(m)

        g("cosyvoice_engine_active", "requests the engine decodes now", s.active)
        g("cosyvoice_engine_queued", "requests waiting in the engine's queue", s.queued)
        c = prom.Counter("cosyvoice_engine_requests_done_total", "requests the engine finished")
        c.inc(by=s.requests_done)
        out.append(c)
        c = prom.Counter("cosyvoice_engine_audio_samples_total", "samples the engine produced")
        c.inc(by=s.audio_samples_out)
        out.append(c)
        if self.refs is not None:
            r = self.refs.stats()
            g("cosyvoice_reference_cache_voices", "reference voices in the cache", r["voices"])
            g("cosyvoice_reference_cache_bytes", "feature bytes of the cached reference voices",
              r["bytes"])
        g("cosyvoice_engine_weights_bytes", "model weights resident", s.weights_bytes)
        g("cosyvoice_engine_kv_pages_used", "KV cache pages in use", s.kv_pages_used)
        g("cosyvoice_engine_kv_pages_total", "KV cache pages", s.kv_pages_total)
        if dev:
            g("cosyvoice_gpu_memory_bytes", "device memory the engine holds", s.device_bytes_total)
            g("cosyvoice_gpu_kv_cache_bytes", "device memory reserved for the KV cache", s.kv_bytes)
        return out


def make_params(req, rate, engine_speed):
    """The cosy_synth_params of a speech request (engine_speed: stretch.split_speed's part)."""
    kw = dict(sample_rate=rate if rate != 24000 else 0)
    if req.seed is not None:
        kw["seed"] = req.seed
    if req.max_tokens is not None:
        kw["max_tokens"] = req.max_tokens
    if req.min_tokens is not None:
        kw["min_tokens"] = req.min_tokens
    if engine_speed != 1.0:
        kw["speed"] = engine_speed
    if req.instructions:
        kw["mode"] = "instruct"
        kw["instruct_text"] = req.instructions
    return cosyvoice.make_params(**kw)


class Job:
    """One speech request's engine side, shared by the event loop and the worker thread that
    submits it: when the client has gone (abandon), a request submitted afterwards is released
    at once, and one already submitted is cancelled."""

    def __init__(self):
        self.lock = threading.Lock()
        self.gone = False
        self.r = None

    def submit(self, engine, voice, text, params):
        """On a worker thread: submit, or None when the client has already gone."""
        r = engine.submit(voice, text, params)
        with self.lock:
            if not self.gone:
                self.r = r
                return r
        r.close()
        return None

    def abandon(self):
        with self.lock:
            self.gone = True
            r, self.r = self.r, None
        if r is not None:
            r.close_when_idle()   # cancels it when it still runs


async def _race(work, watch):
    """Wait for the task work or the client leaving (watch done). True when work finished
    first; else work is cancelled (and awaited) and False is returned."""
    try:
        done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        work.cancel()
        raise
    if work in done:
        return True
    work.cancel()
    try:
        await work
    except BaseException:   # noqa: BLE001 (its CancelledError, or what it raised meanwhile)
        pass
    return False


class AudioResponse(Response):
    """A streamed response whose body generator is cancelled the moment the client leaves (the
    watch task sees the disconnect), whatever the generator waits for: the next engine chunk or
    the socket. on_close() runs at the end in every case (also when the generator never ran)."""

    def __init__(self, body, watch, on_close, media_type, headers=None, status_code=200):
        self.body_iterator = body
        self.watch = watch
        self.on_close = on_close
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)

    async def _stream(self, send):
        try:
            await send({"type": "http.response.start", "status": self.status_code,
                        "headers": self.raw_headers})
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            try:
                await self.body_iterator.aclose()
            finally:
                self.on_close()

    async def __call__(self, scope, receive, send):
        task = asyncio.ensure_future(self._stream(send))
        try:
            finished = await _race(task, self.watch)
        finally:
            self.watch.cancel()
        if finished:
            try:
                task.result()
            except OSError:   # the socket went first (a server that reports it so)
                pass


class Outcome:
    """The accounting of one speech request, done once: when its response ends, or when its
    client leaves before that."""

    def __init__(self, st, fmt, rate, job):
        self.st, self.fmt, self.rate, self.job = st, fmt, rate, job
        self.samples = 0
        self.done = False

    def close(self, code="499"):
        if self.done:
            return
        self.done = True
        st = self.st
        if code == "499":   # the client went away (nginx's name for it)
            st.cancelled.inc()
        self.job.abandon()   # releases the request; cancels it when it is still running
        st.audio_s.inc(by=self.samples / self.rate)
        st.requests.inc(code, self.fmt)
        st.in_progress.inc(by=-1)


def create_app(settings, engine_factory=None):
    """The ASGI app (FastAPI inside BodyLimits); the engine is created at startup
    (engine_factory(settings) when given). The FastAPI app is app.fastapi."""
    st = State(settings)

    async def lifespan(app):
        if engine_factory:
            st.engine = engine_factory(settings)
        else:
            st.engine = cosyvoice.Engine(settings.model, device=settings.device,
                                         max_active=settings.max_active,
                                         max_queued=settings.max_queued,
                                         cpu_threads=settings.cpu_threads,
                                         gpu_memory_fraction=settings.gpu_memory_fraction)
        st.voices = Voices(st.engine, settings)
        st.refs = ReferenceVoices(st.engine, settings.reference_cache_count,
                                  settings.reference_cache_bytes, settings.reference_cache_ttl,
                                  st.ref_results)
        if settings.voice_wav:
            st.voices.fixed[settings.voice_name] = st.engine.voice_from_wav(
                settings.voice_wav, settings.voice_text or "")
        log.info("engine ready: %s on device %d; voices: %s%s", settings.model, settings.device,
                 ", ".join(st.voices.names()) or "(none)",
                 f"; OpenAI's voice names speak as {settings.default_voice!r}"
                 if settings.default_voice else "")
        yield
        st.refs.close()
        st.voices.close()
        st.engine.close()

    app = FastAPI(title="libcosyvoice speech server", lifespan=lifespan)
    app.state.cosy = st

    @app.exception_handler(ApiError)
    async def _api_error(request, exc):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc):
        return validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc):
        return ApiError(exc.status_code, str(exc.detail),
                        code="not_found" if exc.status_code == 404 else None).response()

    @app.exception_handler(Exception)
    async def _unexpected(request, exc):
        log.exception("unexpected error")
        return ApiError(500, f"internal server error: {type(exc).__name__}: {exc}",
                        code="internal_error").response()

    @app.get("/health")
    async def health():
        body = {"status": "ok", "model": settings.served_model_name,
                "device": settings.device, "library": cosyvoice.version()[1]}
        if st.device_lost:
            body["status"] = "device_lost"
            body["error"] = st.device_lost
            return JSONResponse(body, status_code=503)
        if st.engine is None:
            return JSONResponse({"status": "starting"}, status_code=503)
        s = st.engine.stats()
        body.update(active=s.active, queued=s.queued,
                    requests_in_progress=st.in_progress.get(),
                    engine_calls={"llm_steps": s.llm_steps, "flow": s.flow_calls,
                                  "vocoder": s.vocoder_calls})
        return body

    created = int(time.time())

    def model_object(name):
        return {"id": name, "object": "model", "created": created, "owned_by": "libcosyvoice"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_object(n) for n in settings.model_names]}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        if model_id not in settings.model_names:
            raise ApiError(404, f"the model {model_id[:MAX_NAME_CHARS]!r} does not exist; this "
                           f"server has {', '.join(map(repr, settings.model_names))}",
                           param="model", code="model_not_found")
        return model_object(model_id)

    def voice_object(name):
        return {"id": name, "object": "voice",
                "source": "startup" if name in st.voices.fixed else "folder"}

    @app.get("/v1/voices")
    async def voices():
        return {"object": "list", "data": [voice_object(n) for n in st.voices.names()]}

    @app.get("/v1/voices/{name}")
    async def voice_get(name: str):
        check_voice_name(name)
        if name not in st.voices.names():
            raise ApiError(404, f"voice {name!r} not found", param="voice",
                           code="voice_not_found")
        return voice_object(name)

    @app.delete("/v1/voices/{name}")
    async def voice_delete(name: str):
        await asyncio.to_thread(st.voices.delete, name)
        return {"id": name, "object": "voice", "deleted": True}

    @app.post("/v1/voices", status_code=201)
    async def voice_create(request: Request):
        """A voice cloned from a recording and its transcript, kept in the voices folder: JSON
        {"name", "transcript", "audio": base64 WAV}, or the WAV itself as the body (any
        audio/* or application/octet-stream type) with ?name=&transcript=."""
        raw = await request.body()
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype == "application/json":
            try:
                data = json.loads(raw) if raw.strip() else None
            except (ValueError, RecursionError) as e:
                raise ApiError(400, f"the request body is not valid JSON: {e}",
                               code="invalid_json") from None
            if not isinstance(data, dict):
                raise ApiError(400, 'expected a JSON object {"name", "transcript", "audio"}',
                               code="invalid_json")
            unknown = sorted(set(data) - {"name", "transcript", "audio"})
            if unknown:
                raise ApiError(400, f"unrecognized request argument: {unknown[0]}",
                               param=unknown[0], code="extra_forbidden")
            name, transcript, audio = data.get("name"), data.get("transcript"), data.get("audio")
            if not isinstance(audio, str) or not audio:
                raise ApiError(400, "audio must be the WAV file in base64", param="audio",
                               code="missing" if audio is None else "invalid_value")
            try:
                wav = base64.b64decode(audio, validate=True)
            except ValueError:
                raise ApiError(400, "audio is not valid base64", param="audio",
                               code="invalid_value") from None
        else:
            name = request.query_params.get("name")
            transcript = request.query_params.get("transcript")
            wav = raw
        if name is None:
            raise ApiError(400, "missing required parameter: name", param="name", code="missing")
        check_voice_name(name, "name")
        if transcript is None:
            raise ApiError(400, "missing required parameter: transcript (what the recording "
                           "says)", param="transcript", code="missing")
        if not isinstance(transcript, str):
            raise ApiError(400, "transcript must be a string", param="transcript",
                           code="invalid_type")
        check_text("transcript", transcript, settings.max_instructions_chars)
        if not wav:
            raise ApiError(400, "no audio", param="audio", code="missing")
        await asyncio.to_thread(st.voices.create, name, wav, transcript)
        return JSONResponse(voice_object(name), status_code=201)

    @app.websocket("/v1/audio/speech/stream")
    async def speech_stream(websocket: WebSocket):
        from .ws import serve
        await serve(websocket, st, settings)

    @app.get("/metrics")
    async def metrics_endpoint():
        ms = [st.requests, st.ttfb, st.audio_s, st.cancelled, st.failed_mid, st.in_progress,
              st.ref_results]
        return Response(prom.render(ms + st.engine_gauges()), media_type=prom.CONTENT_TYPE)

    @app.post("/v1/audio/speech", openapi_extra={"requestBody": {
        "required": True,
        "content": {"application/json": {"schema": SpeechRequest.model_json_schema()}}}})
    async def speech(request: Request):
        t0 = time.monotonic()
        fmt = "-"
        st.in_progress.inc()
        out = None
        watch = None
        handed_off = False
        try:
            raw = await request.body()
            if len(raw) > settings.max_body_bytes:
                # only a reference recording may make it larger (up to max_upload_bytes);
                # parsed on a worker thread: megabytes of JSON would hold the event loop
                req = await asyncio.to_thread(parse_large, raw, settings)
            else:
                req = parse_speech(raw)
            fmt, name = check_request(req, settings)
            out = Outcome(st, fmt, req.sample_rate or 24000, Job())
            # the body is read: the next message is the client's disconnect
            watch = asyncio.ensure_future(wait_disconnect(request.receive))
            work = asyncio.ensure_future(_start(req, fmt, name, out, t0))
            if not await _race(work, watch):
                out.close("499")
                return Response(status_code=499)   # nobody reads it
            resp = work.result()
            if isinstance(resp, AudioResponse):
                handed_off = True
                resp.watch = watch
            return resp
        except ApiError as e:
            if out is not None:
                out.close(str(e.status))
                out = None
            else:
                st.requests.inc(str(e.status), fmt)
                st.in_progress.inc(by=-1)
            return e.response()
        except BaseException:
            if out is not None:
                out.close("500")
            raise
        finally:
            if not handed_off:
                if watch is not None:
                    watch.cancel()
                if out is not None:
                    out.close("200")

    async def _start(req, fmt, name, out, t0):
        """Voice, submit, first chunk, then the response: whole (all the audio, exact lengths)
        or streamed from the first chunk on. Errors before any byte get a status code."""
        if st.device_lost:
            raise ApiError(500, f"the GPU was lost: {st.device_lost}", code="device_lost")
        if name is None:   # a reference recording: its voice is cloned (or cached)
            ref = await asyncio.to_thread(parse_reference, req.voice,
                                          settings.max_instructions_chars)
            voice = await st.refs.get(ref)
        else:
            voice = await asyncio.to_thread(st.voices.get, name)
        rate = out.rate
        engine_speed, rest = split_speed(req.speed)
        sse = req.stream_format == "sse"
        whole = not sse and (req.stream is False or (req.stream is None and req.speed != 1.0))
        try:
            params = make_params(req, rate, engine_speed)
        except (ValueError, TypeError) as e:
            raise ApiError(400, str(e)) from None
        try:
            # submit normalizes and tokenizes the text on the calling thread (~6 ms per 1,000
            # characters): off the event loop, and concurrent requests in parallel
            r = await asyncio.to_thread(out.job.submit, st.engine, voice, req.input, params)
            if r is None:
                raise asyncio.CancelledError()
            chunks = r.achunks()
            if whole:
                pcm = [c async for c in chunks]
                pcm = np.concatenate(pcm) if pcm else np.zeros(0, np.float32)
                if rest != 1.0:
                    pcm = await asyncio.to_thread(time_stretch, pcm, rest, rate)
                data = await asyncio.to_thread(encoders.encode_whole, fmt, rate, pcm)
                out.samples = pcm.size
                st.ttfb.observe(time.monotonic() - t0)
                return Response(data, media_type=encoders.CONTENT_TYPES[fmt])
            try:
                first = await chunks.__anext__()
            except StopAsyncIteration:
                first = None
        except cosyvoice.CosyError as e:
            out.job.abandon()
            if isinstance(e, cosyvoice.DeviceLost):
                st.device_lost = str(e)
            raise engine_error(e) from None
        body = _body(req, fmt, rate, rest, out, chunks, first, t0)
        media = "text/event-stream" if sse else encoders.CONTENT_TYPES[fmt]
        headers = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}
        return AudioResponse(body, None, out.close, media, headers)

    async def _body(req, fmt, rate, rest, out, chunks, first, t0):
        sse = req.stream_format == "sse"
        enc = encoders.Encoder(fmt, rate)
        sent_first = False
        code = "499"

        def frame(data):
            if not sse:
                return data
            return ("data: " + json.dumps({"type": "speech.audio.delta",
                                           "audio": base64.b64encode(data).decode()}) +
                    "\n\n").encode()

        try:
            c = first
            while c is not None:
                if rest != 1.0:
                    c = await asyncio.to_thread(time_stretch, c, rest, rate)
                out.samples += c.size
                data = enc.encode(c)
                if data:
                    if not sent_first:
                        st.ttfb.observe(time.monotonic() - t0)
                        sent_first = True
                    yield frame(data)
                try:
                    c = await chunks.__anext__()
                except StopAsyncIteration:
                    c = None
            tail = enc.finish()
            if tail:
                if not sent_first:
                    st.ttfb.observe(time.monotonic() - t0)
                    sent_first = True
                yield frame(tail)
            if sse:
                r = out.job.r
                rs = r.stats() if r is not None else None
                usage = {"input_tokens": rs.n_text_tokens if rs else 0,
                         "output_tokens": rs.n_speech_tokens if rs else 0}
                usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
                yield ("data: " + json.dumps({"type": "speech.audio.done", "usage": usage}) +
                       "\n\n").encode()
            code = "200"
        except cosyvoice.CosyError as e:
            # headers are gone: SSE gets an error event; a plain audio stream is cut short
            code = str(engine_error(e).status)
            st.failed_mid.inc()
            if isinstance(e, cosyvoice.DeviceLost):
                st.device_lost = str(e)
            log.error("stream failed after %d samples: %s", out.samples, e)
            if sse:
                yield ("data: " + json.dumps({"type": "error", "error": {
                    "message": str(e), "type": "server_error", "param": None,
                    "code": "engine_error"}}) + "\n\n").encode()
        finally:
            enc.close()
            out.close(code)

    upload = max(settings.max_upload_bytes, settings.max_body_bytes)
    return BodyLimits(app, settings.max_body_bytes, settings.read_timeout,
                      {("POST", "/v1/voices"): settings.max_upload_bytes,
                       # larger bodies are refused after reading unless a reference recording
                       # makes up the rest (parse_large)
                       ("POST", "/v1/audio/speech"): (
                           upload, f"{settings.max_body_bytes}, and {upload} with a reference "
                           "recording in voice.audio")})
