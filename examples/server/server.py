#!/usr/bin/env python3
"""server.py - an OpenAI-compatible speech endpoint on libcosyvoice (FastAPI + uvicorn).

    python3 server.py --model MODEL.gguf --voices VOICES_DIR [--device -1|N] [--port 8000]

    curl -s localhost:8000/v1/audio/speech -H 'Content-Type: application/json' \
        -d '{"model": "cosyvoice3", "input": "Hello.", "voice": "alloy", "response_format": "wav"}' \
        -o hello.wav

Endpoints:
  POST /v1/audio/speech   body {model, input, voice, instructions?, response_format?, speed?,
                          stream_format?} as OpenAI's; voice names a saved voice: VOICES_DIR/NAME.gguf
                          (cosy_voice_save, `cosyvoice-say --save-voice`). Extensions: seed,
                          sample_rate, max_tokens, min_tokens (cosy_synth_params).
  GET  /v1/models         the model (and its accepted aliases)
  GET  /v1/voices         the voice names found in VOICES_DIR (not an OpenAI endpoint)
  GET  /health            200 {"status": "ok", ...}; 503 after the device was lost
  GET  /metrics           Prometheus text: requests, TTFB histogram, active/queued, memory

Audio streams: the response starts when the engine's first chunk exists and every later chunk is
sent as it is made (chunked transfer), for wav (a header of unknown length), pcm (16-bit little
endian mono) and opus; flac and mp3 need the whole utterance (encoders.py says why). speed other
than 1.0 uses blocking synthesis (the library streams at speed 1 only), so the audio is sent
when complete. stream_format "sse" sends `speech.audio.delta` events (base64 audio in
response_format) and a final `speech.audio.done` with usage (text tokens in, speech tokens out).

A client that goes away mid-stream cancels its request (cosy_request_cancel) and the request is
released. Errors use OpenAI's JSON shape {"error": {"message", "type", "param", "code"}}: bad
requests 4xx; engine failures 5xx (queue full and out of memory: 503; device lost: 500 and
/health turns 503); the server keeps serving.
"""
import argparse
import asyncio
import base64
import json
import logging
import os
import re
import threading
import time
from typing import Optional, Union

import cosyvoice
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

import encoders
import metrics as prom

log = logging.getLogger("cosyvoice.server")

VOICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEFAULT_ALIASES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
TTFB_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)


class Settings:
    def __init__(self, model, voices, device=-1, max_active=0, max_queued=0, cpu_threads=0,
                 gpu_memory_fraction=0.0, served_model_name="cosyvoice3",
                 model_aliases=DEFAULT_ALIASES, max_input_chars=4096,
                 default_response_format="mp3"):
        self.model, self.voices = model, voices
        self.device, self.max_active, self.max_queued = device, max_active, max_queued
        self.cpu_threads, self.gpu_memory_fraction = cpu_threads, gpu_memory_fraction
        self.served_model_name = served_model_name
        self.model_aliases = tuple(a for a in model_aliases if a)
        self.max_input_chars = max_input_chars
        self.default_response_format = default_response_format


class SpeechRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1)
    input: str
    voice: Union[str, dict]
    instructions: Optional[str] = None
    response_format: Optional[str] = None
    speed: float = 1.0
    stream_format: str = "audio"
    # extensions (cosy_synth_params)
    seed: Optional[int] = Field(default=None, ge=0, lt=2**64)
    sample_rate: Optional[int] = Field(default=None, ge=8000, le=48000)
    max_tokens: Optional[int] = Field(default=None, ge=1, le=2**31 - 1)
    min_tokens: Optional[int] = Field(default=None, ge=1, le=2**31 - 1)


class ApiError(Exception):
    """An error answered in OpenAI's shape."""

    def __init__(self, status, message, type_="invalid_request_error", param=None, code=None,
                 headers=None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, \
            param, code
        self.headers = headers

    def response(self):
        return JSONResponse({"error": {"message": self.message, "type": self.type,
                                       "param": self.param, "code": self.code}},
                            status_code=self.status, headers=self.headers)


def engine_error(e):
    """ApiError for a library failure (typed cosyvoice errors)."""
    if isinstance(e, (cosyvoice.InvalidArgument, cosyvoice.TextError)):
        return ApiError(400, e.message, param="input" if isinstance(e, cosyvoice.TextError) else None,
                        code="invalid_text" if isinstance(e, cosyvoice.TextError) else "invalid_value")
    if isinstance(e, cosyvoice.QueueFull):
        return ApiError(503, f"the engine's queue is full: {e.message}", "server_error",
                        code="queue_full", headers={"Retry-After": "1"})
    if isinstance(e, (cosyvoice.GpuOutOfMemory, cosyvoice.OutOfMemory)):
        return ApiError(503, f"out of memory: {e.message}", "server_error", code="out_of_memory",
                        headers={"Retry-After": "1"})
    if isinstance(e, cosyvoice.Timeout):
        return ApiError(504, e.message, "server_error", code="timeout")
    return ApiError(500, f"{e}", "server_error", code="engine_error")


class Voices:
    """Saved voices of a directory (NAME.gguf), loaded on first use and kept; a file changed on
    disk is loaded again."""

    def __init__(self, engine, directory):
        self.engine, self.dir = engine, directory
        self.cache = {}   # name -> (mtime_ns, Voice)
        self.lock = threading.Lock()

    def names(self):
        try:
            files = os.listdir(self.dir)
        except OSError:
            return []
        return sorted(f[:-5] for f in files if f.endswith(".gguf") and VOICE_NAME.match(f[:-5]))

    def get(self, name):
        """The Voice called name (blocking: run it on a worker thread). ApiError when there is
        no such voice (400) or its file does not load (500)."""
        if not isinstance(name, str) or not VOICE_NAME.match(name):
            raise ApiError(400, f"invalid voice name {name!r}: letters, digits, '.', '_' and '-' "
                           "(at most 128, not starting with a punctuation mark)", param="voice",
                           code="invalid_voice")
        path = os.path.join(self.dir, name + ".gguf")
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
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
                raise ApiError(500, f"voice {name!r} could not be loaded: {e}", "server_error",
                               code="voice_load_failed") from None
            if hit:
                hit[1].close()   # requests using it keep it alive
            self.cache[name] = (mtime, v)
            return v


class State:
    def __init__(self, settings):
        self.settings = settings
        self.engine = None
        self.voices = None
        self.device_lost = None
        self.requests = prom.Counter("cosyvoice_speech_requests_total",
                                     "speech requests answered, by HTTP status and format",
                                     ("code", "format"))
        self.ttfb = prom.Histogram("cosyvoice_ttfb_seconds",
                                   "request received -> first audio bytes handed to the server",
                                   TTFB_BUCKETS)
        self.audio_s = prom.Counter("cosyvoice_audio_seconds_total", "audio seconds sent")
        self.cancelled = prom.Counter("cosyvoice_client_disconnects_total",
                                      "streams whose client left before the end (request cancelled)")
        self.failed_mid = prom.Counter("cosyvoice_stream_failures_total",
                                       "streams that failed after their first bytes were sent")
        self.in_progress = prom.Gauge("cosyvoice_requests_in_progress",
                                      "speech requests being answered now")
        self.in_progress.set(value=0)

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
        g("cosyvoice_engine_weights_bytes", "model weights resident", s.weights_bytes)
        g("cosyvoice_engine_kv_pages_used", "KV cache pages in use", s.kv_pages_used)
        g("cosyvoice_engine_kv_pages_total", "KV cache pages", s.kv_pages_total)
        if dev:
            g("cosyvoice_gpu_memory_bytes", "device memory the engine holds", s.device_bytes_total)
            g("cosyvoice_gpu_kv_cache_bytes", "device memory reserved for the KV cache", s.kv_bytes)
        return out


def make_params(req, rate):
    kw = dict(sample_rate=rate if rate != 24000 else 0)
    if req.seed is not None:
        kw["seed"] = req.seed
    if req.max_tokens is not None:
        kw["max_tokens"] = req.max_tokens
    if req.min_tokens is not None:
        kw["min_tokens"] = req.min_tokens
    if req.speed != 1.0:
        kw["speed"] = req.speed
    if req.instructions:
        kw["mode"] = "instruct"
        kw["instruct_text"] = req.instructions
    return cosyvoice.make_params(**kw)


def create_app(settings, engine_factory=None):
    """The FastAPI app; the engine is created at startup (engine_factory(settings) when given)."""
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
        st.voices = Voices(st.engine, settings.voices)
        log.info("engine ready: %s on device %d; voices in %s: %s", settings.model,
                 settings.device, settings.voices, ", ".join(st.voices.names()) or "(none)")
        yield
        st.engine.close()

    app = FastAPI(title="libcosyvoice speech server", lifespan=lifespan)
    app.state.cosy = st

    @app.exception_handler(ApiError)
    async def _api_error(request, exc):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc):
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        param = ".".join(loc) or None
        msg = first.get("msg", "invalid request")
        if first.get("type") == "extra_forbidden":
            msg = f"unrecognized request argument: {param}"
        elif first.get("type") == "missing":
            msg = f"missing required parameter: {param}"
        elif param:
            msg = f"{param}: {msg}"
        return ApiError(400, msg, param=param, code=first.get("type")).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, exc):
        return ApiError(exc.status_code, str(exc.detail),
                        "invalid_request_error" if exc.status_code < 500 else "server_error",
                        code="not_found" if exc.status_code == 404 else None).response()

    @app.exception_handler(Exception)
    async def _unexpected(request, exc):
        log.exception("unexpected error")
        return ApiError(500, f"internal server error: {type(exc).__name__}: {exc}",
                        "server_error", code="internal_error").response()

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
        body.update(active=s.active, queued=s.queued)
        return body

    @app.get("/v1/models")
    async def models():
        now = int(time.time())
        return {"object": "list",
                "data": [{"id": name, "object": "model", "created": now, "owned_by": "libcosyvoice"}
                         for name in (settings.served_model_name,) + settings.model_aliases]}

    @app.get("/v1/voices")
    async def voices():
        return {"object": "list", "data": [{"id": n, "object": "voice"} for n in st.voices.names()]}

    @app.get("/metrics")
    async def metrics_endpoint():
        ms = [st.requests, st.ttfb, st.audio_s, st.cancelled, st.failed_mid, st.in_progress]
        return Response(prom.render(ms + st.engine_gauges()), media_type=prom.CONTENT_TYPE)

    @app.post("/v1/audio/speech")
    async def speech(req: SpeechRequest, request: Request):
        t0 = time.monotonic()
        fmt = req.response_format or settings.default_response_format
        st.in_progress.inc()
        handed_off = False
        try:
            resp = await _speech(req, fmt, t0)
            handed_off = isinstance(resp, StreamingResponse)
            if not handed_off:
                st.requests.inc(str(resp.status_code), fmt)
            return resp
        except ApiError as e:
            st.requests.inc(str(e.status), fmt)
            return e.response()
        finally:
            if not handed_off:
                st.in_progress.inc(by=-1)

    async def _speech(req, fmt, t0):
        if req.model not in (settings.served_model_name,) + settings.model_aliases:
            raise ApiError(404, f"the model {req.model!r} does not exist; this server has "
                           f"{settings.served_model_name!r} (aliases: "
                           f"{', '.join(settings.model_aliases) or 'none'})",
                           param="model", code="model_not_found")
        for field in ("input", "instructions"):
            value = getattr(req, field)
            try:
                value is None or value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise ApiError(400, f"{field} is not valid UTF-8 text: {e.reason} at character "
                               f"{e.start}", param=field, code="invalid_text") from None
        if not req.input.strip():
            raise ApiError(400, "input is empty", param="input", code="empty_input")
        if len(req.input) > settings.max_input_chars:
            raise ApiError(400, f"input has {len(req.input)} characters; the limit is "
                           f"{settings.max_input_chars} (split the text into several requests)",
                           param="input", code="string_above_max_length")
        if fmt not in encoders.ALL_FORMATS:
            raise ApiError(400, f"response_format {fmt!r} is not one of "
                           f"{', '.join(encoders.ALL_FORMATS)}", param="response_format",
                           code="invalid_value")
        if req.stream_format not in ("audio", "sse"):
            raise ApiError(400, f"stream_format {req.stream_format!r} is not 'audio' or 'sse'",
                           param="stream_format", code="invalid_value")
        if not 0.5 <= req.speed <= 2.0:
            raise ApiError(400, f"speed {req.speed} is outside what this model supports "
                           "(0.5 .. 2.0)", param="speed", code="invalid_value")
        if (req.min_tokens is not None and req.max_tokens is not None
                and req.min_tokens > req.max_tokens):
            raise ApiError(400, "min_tokens is larger than max_tokens", param="min_tokens",
                           code="invalid_value")
        rate = req.sample_rate or 24000
        why = encoders.unsupported_reason(fmt, rate)
        if why:
            raise ApiError(400, why, param="response_format", code="unsupported_format")
        name = req.voice.get("id") if isinstance(req.voice, dict) else req.voice
        if st.device_lost:
            raise ApiError(500, f"the GPU was lost: {st.device_lost}", "server_error",
                           code="device_lost")
        voice = await asyncio.to_thread(st.voices.get, name)
        try:
            params = make_params(req, rate)
        except (ValueError, TypeError) as e:
            raise ApiError(400, str(e)) from None
        enc = encoders.Encoder(fmt, rate)
        r = None
        try:
            if req.speed != 1.0:
                pcm = await asyncio.to_thread(st.engine.synthesize, voice, req.input, params)
                chunks = _whole(pcm)
                first = await chunks.__anext__()
            else:
                # submit normalizes and tokenizes the text on the calling thread (~6 ms per
                # 1,000 characters): off the event loop, and concurrent requests in parallel
                r = await asyncio.to_thread(st.engine.submit, voice, req.input, params)
                chunks = r.achunks()
                first = await chunks.__anext__()   # errors before any byte get a status code
        except StopAsyncIteration:
            first = None
        except cosyvoice.CosyError as e:
            enc.close()
            if r is not None:
                r.close_when_idle()
            if isinstance(e, cosyvoice.DeviceLost):
                st.device_lost = str(e)
            raise engine_error(e) from None
        return StreamingResponse(_body(req, fmt, rate, enc, r, chunks, first, t0),
                                 media_type="text/event-stream" if req.stream_format == "sse"
                                 else encoders.CONTENT_TYPES[fmt],
                                 headers={"X-Accel-Buffering": "no", "Cache-Control": "no-cache"})

    async def _whole(pcm):
        yield pcm

    async def _body(req, fmt, rate, enc, r, chunks, first, t0):
        sse = req.stream_format == "sse"
        samples = 0
        sent_first = False
        code = "200"
        finished = False

        def frame(data):
            if not sse:
                return data
            return ("data: " + json.dumps({"type": "speech.audio.delta",
                                           "audio": base64.b64encode(data).decode()}) +
                    "\n\n").encode()

        try:
            c = first
            while c is not None:
                samples += c.size
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
                rs = r.stats() if r is not None else None
                usage = {"input_tokens": rs.n_text_tokens if rs else 0,
                         "output_tokens": rs.n_speech_tokens if rs else 0}
                usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
                yield ("data: " + json.dumps({"type": "speech.audio.done", "usage": usage}) +
                       "\n\n").encode()
            finished = True
        except cosyvoice.CosyError as e:
            # headers are gone: SSE gets an error event; a plain audio stream is cut short
            code = str(engine_error(e).status)
            st.failed_mid.inc()
            if isinstance(e, cosyvoice.DeviceLost):
                st.device_lost = str(e)
            log.error("stream failed after %d samples: %s", samples, e)
            if sse:
                yield ("data: " + json.dumps({"type": "error", "error": {
                    "message": str(e), "type": "server_error", "param": None,
                    "code": "engine_error"}}) + "\n\n").encode()
            else:
                raise
        finally:
            if not finished and code == "200":
                code = "499"   # the client went away (nginx's name for it)
                st.cancelled.inc()
            enc.close()
            if r is not None:
                r.close_when_idle()   # cancels it when it is still running
            st.audio_s.inc(by=samples / rate)
            st.requests.inc(code, fmt)
            st.in_progress.inc(by=-1)

    return app


def main(argv=None, engine_factory=None):
    """The command line; engine_factory as create_app's (bench/serve_overhead.py serves a stand-in
    engine through exactly this uvicorn setup)."""
    env = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=env("COSYVOICE_MODEL"), help="model file (COSYVOICE_MODEL)")
    ap.add_argument("--voices", default=env("COSYVOICE_VOICES"),
                    help="directory of NAME.gguf voice files (COSYVOICE_VOICES)")
    ap.add_argument("--device", type=int, default=int(env("COSYVOICE_DEVICE", "-1")),
                    help="CUDA ordinal, or -1 for the CPU (COSYVOICE_DEVICE)")
    ap.add_argument("--max-active", type=int, default=0, help="engine max_active (0 = default)")
    ap.add_argument("--max-queued", type=int, default=0, help="engine max_queued (0 = default)")
    ap.add_argument("--cpu-threads", type=int, default=0)
    ap.add_argument("--gpu-memory-fraction", type=float, default=0.0)
    ap.add_argument("--served-model-name", default="cosyvoice3")
    ap.add_argument("--model-alias", action="append", default=None,
                    help="another accepted model name (repeatable; default: "
                         f"{', '.join(DEFAULT_ALIASES)}; give '' for none)")
    ap.add_argument("--max-input-chars", type=int, default=4096)
    ap.add_argument("--default-response-format", default="mp3", choices=encoders.ALL_FORMATS,
                    help="when a request names none (OpenAI's default: mp3)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--http", default="auto", choices=("auto", "h11", "httptools"),
                    help="uvicorn's HTTP parser (auto: httptools when installed)")
    ap.add_argument("--loop", default="auto", choices=("auto", "asyncio", "uvloop"),
                    help="uvicorn's event loop (auto: uvloop when installed)")
    a = ap.parse_args(argv)
    if not a.model or not a.voices:
        ap.error("--model and --voices are required (or COSYVOICE_MODEL and COSYVOICE_VOICES)")
    if not os.path.isdir(a.voices):
        ap.error(f"--voices {a.voices}: not a directory")
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    settings = Settings(a.model, a.voices, a.device, a.max_active, a.max_queued, a.cpu_threads,
                        a.gpu_memory_fraction, a.served_model_name,
                        DEFAULT_ALIASES if a.model_alias is None else tuple(a.model_alias),
                        a.max_input_chars, a.default_response_format)
    import uvicorn
    uvicorn.run(create_app(settings, engine_factory), host=a.host, port=a.port, log_level=a.log_level,
                http=a.http, loop=a.loop, timeout_graceful_shutdown=5)


if __name__ == "__main__":
    main()
