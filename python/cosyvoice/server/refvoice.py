"""Reference voices: a recording and its transcript sent with one request instead of a voice name.

    POST /v1/audio/speech   "voice": {"audio": "<base64 WAV>", "text": "what it says"}
    WebSocket session       {"type": "session", "voice": {"audio": ..., "text": ...}}

The voice is cloned by the library (cosy_voice_from_audio, the same path as POST /v1/voices) on a
worker thread, used for that request (or that WebSocket session) and not saved. Cloning costs a
front-end run (speech tokenizer and speaker model), so the voices of recent references are kept
in a small in-memory cache keyed by the SHA-256 of the WAV bytes and the transcript: a request
that sends the same recording and transcript again within `ttl` seconds of the last use gets the
cached voice. The cache holds at most `max_count` voices and `max_bytes` bytes of their features
(FEATURE_BYTES_PER_SECOND per second of reference audio), dropping the least recently used; a
voice dropped while a request still uses it lives until that request ends. Identical references
that arrive while the first one's voice is being made wait for that one clone. A client that
leaves while its voice is being made leaves the clone to finish on its thread; the voice goes
into the cache (bounded) and nothing else is kept.

Limits: the request (or WebSocket message) that carries the audio may be up to the server's
max_upload_bytes, every other one max_body_bytes (`oversize`); the library's limits on the
audio (0.5 .. 30 s, 16 .. 192 kHz, not silent, not clipped) and the transcript (at most
max_instructions_chars characters, not empty) answer 400 naming voice.audio or voice.text.
"""
import asyncio
import base64
import hashlib
import time
from collections import OrderedDict

import cosyvoice
from cosyvoice.audio import decode_wav

from .errors import ApiError, engine_error

KEYS = ("audio", "text")
# bytes a voice holds per second of its reference: the prompt mel (50 frames of 80 float32) and
# the speech tokens (25 int32), lib/engine.h's struct cosy_voice
FEATURE_BYTES_PER_SECOND = 50 * 80 * 4 + 25 * 4
DEFAULT_CACHE_COUNT = 32
DEFAULT_CACHE_BYTES = 16 << 20
DEFAULT_CACHE_TTL = 300.0


def is_reference(voice):
    """Whether a request's voice field is a reference object: a dict with "audio" or "text" (and
    no "id": {"id": NAME} names a voice)."""
    return isinstance(voice, dict) and "id" not in voice and ("audio" in voice or "text" in voice)


class Reference:
    """A parsed reference: the WAV's bytes, its transcript and their cache key."""

    def __init__(self, wav, text, param):
        self.wav, self.text, self.param = wav, text, param
        h = hashlib.sha256()
        h.update(len(wav).to_bytes(8, "little"))
        h.update(wav)
        h.update(text.encode("utf-8"))
        self.key = h.hexdigest()


def parse_reference(voice, max_text_chars, param="voice"):
    """A Reference from {"audio": base64 WAV (a data: URL too), "text": transcript}; ApiError 400
    naming param.audio or param.text. Decodes base64 and hashes: run it on a worker thread when
    the audio may be large."""
    from .app import check_text
    unknown = sorted(set(voice) - set(KEYS))
    if unknown:
        raise ApiError(400, f"unrecognized field {param}.{unknown[0]}: a voice is a name, "
                       '{"id": NAME}, or a reference recording {"audio": "<base64 WAV>", '
                       '"text": "its transcript"}', param=f"{param}.{unknown[0]}",
                       code="extra_forbidden")
    audio, text = voice.get("audio"), voice.get("text")
    pa, pt = f"{param}.audio", f"{param}.text"
    if audio is None:
        raise ApiError(400, f"missing required parameter: {pa} (the reference recording, a WAV "
                       "file in base64)", param=pa, code="missing")
    if not isinstance(audio, str):
        raise ApiError(400, f"{pa} must be a string: a WAV file in base64", param=pa,
                       code="invalid_type")
    if audio.startswith("data:"):   # a data URL: data:audio/wav;base64,....
        head, sep, rest = audio.partition(",")
        if not sep or not head.endswith(";base64"):
            raise ApiError(400, f"{pa} is a data URL without ';base64,'", param=pa,
                           code="invalid_value")
        audio = rest
    if not audio:
        raise ApiError(400, f"{pa} is empty", param=pa, code="invalid_value")
    try:
        wav = base64.b64decode(audio, validate=True)
    except ValueError:
        raise ApiError(400, f"{pa} is not valid base64 (the WAV file's bytes, standard alphabet "
                       "with padding)", param=pa, code="invalid_base64") from None
    if text is None:
        raise ApiError(400, f"missing required parameter: {pt} (what the recording says)",
                       param=pt, code="missing")
    if not isinstance(text, str):
        raise ApiError(400, f"{pt} must be a string", param=pt, code="invalid_type")
    check_text(pt, text, max_text_chars)
    if not text.strip():
        raise ApiError(400, f"{pt} is empty: give the transcript of the recording (cloning a "
                       "voice needs it)", param=pt, code="empty_text")
    return Reference(wav, text, param)


def decode(wav, param="audio"):
    """(pcm, rate) of a WAV file's bytes; ApiError 400 (invalid_audio, naming param) when they are
    not a WAV file the server reads."""
    try:
        return decode_wav(wav, param)
    except ValueError as e:
        raise ApiError(400, str(e), param=param, code="invalid_audio") from None


def clone(engine, pcm, rate, transcript, audio_param="audio", text_param="transcript"):
    """The library's voice of a recording (blocking); ApiError for its failures: a 400 names
    text_param when the library refused the transcript, else audio_param (its length, rate,
    level ...)."""
    try:
        return engine.voice_from_audio(pcm, rate, transcript)
    except cosyvoice.CosyError as e:
        err = engine_error(e)
        if err.status == 400 and err.param in (None, "input"):
            err.param = text_param if isinstance(e, cosyvoice.TextError) else audio_param
        raise err from None


def oversize(size, data, max_body_bytes, max_upload_bytes):
    """The message of a 413 for a request (or WebSocket message) of size bytes whose parsed JSON
    is data, or None: above max_body_bytes only the bytes of a reference recording (voice.audio)
    may take it up to max_upload_bytes."""
    if size <= max_body_bytes:
        return None
    voice = data.get("voice") if isinstance(data, dict) else None
    audio = voice.get("audio") if is_reference(voice) else None
    rest = size - len(audio) if isinstance(audio, str) else size
    if rest <= max_body_bytes and size <= max_upload_bytes:
        return None
    return (f"the request has {size} bytes; the limit is {max_body_bytes}, and "
            f"{max_upload_bytes} with a reference recording in voice.audio")


class ReferenceVoices:
    """The cache of reference voices (module docstring). Used on the event loop only; cloning
    runs on worker threads."""

    def __init__(self, engine, max_count=DEFAULT_CACHE_COUNT, max_bytes=DEFAULT_CACHE_BYTES,
                 ttl=DEFAULT_CACHE_TTL, counter=None):
        self.engine = engine
        self.max_count, self.max_bytes, self.ttl = max_count, max_bytes, ttl
        self.entries = OrderedDict()   # key -> [Voice, bytes, last use]; oldest use first
        self.pending = {}              # key -> the task making its voice
        self.bytes = 0
        self.counter = counter         # metrics Counter labelled by result, or None
        self.closed = False

    def _count(self, result):
        if self.counter is not None:
            self.counter.inc(result)

    def _drop(self, key):
        _, nbytes, _ = self.entries.pop(key)
        self.bytes -= nbytes   # the Voice goes when its last request lets it go (Voice.__del__)

    def _expire(self, now):
        while self.entries:
            key, (_, _, used) = next(iter(self.entries.items()))
            if now - used <= self.ttl:
                break
            self._drop(key)

    def _make(self, ref):
        """On a worker thread: (Voice, its feature bytes)."""
        pa = ref.param + ".audio"
        pcm, rate = decode(ref.wav, pa)
        v = clone(self.engine, pcm, rate, ref.text, pa, ref.param + ".text")
        nbytes = int(pcm.size / rate * FEATURE_BYTES_PER_SECOND) + len(ref.text.encode())
        return v, nbytes

    def _finished(self, key, task):
        self.pending.pop(key, None)
        if task.cancelled():
            return
        if task.exception() is not None:
            self._count("failed")
            return
        v, nbytes = task.result()
        self._count("cloned")
        if self.closed:
            v.close()
            return
        if self.max_count <= 0 or nbytes > self.max_bytes:
            return   # not kept: it lives as long as the requests that wait for it
        if key in self.entries:
            self._drop(key)
        self.entries[key] = [v, nbytes, time.monotonic()]
        self.bytes += nbytes
        while len(self.entries) > self.max_count or self.bytes > self.max_bytes:
            self._drop(next(iter(self.entries)))

    async def get(self, ref):
        """The Voice of a Reference: cached, being made, or cloned now (off the event loop).
        A caller that is cancelled meanwhile does not stop the clone (see the module
        docstring)."""
        self._expire(time.monotonic())
        hit = self.entries.get(ref.key)
        if hit is not None:
            hit[2] = time.monotonic()
            self.entries.move_to_end(ref.key)
            self._count("cached")
            return hit[0]
        task = self.pending.get(ref.key)
        if task is None:
            task = asyncio.ensure_future(asyncio.to_thread(self._make, ref))
            self.pending[ref.key] = task
            task.add_done_callback(lambda t, key=ref.key: self._finished(key, t))
        else:
            self._count("joined")
        v, _ = await asyncio.shield(task)
        return v

    def stats(self):
        return {"voices": len(self.entries), "bytes": self.bytes, "cloning": len(self.pending)}

    def close(self):
        self.closed = True
        for v, _, _ in self.entries.values():
            v.close()
        self.entries.clear()
        self.bytes = 0
