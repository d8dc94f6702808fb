"""Engine, Voice and Request: the objects of include/cosyvoice.h with Python lifetimes.

Audio is numpy float32, mono, in [-1, 1]. Every call into the library goes through ctypes, which
releases the GIL for the duration of the call: a thread blocked in Request.read() (a pull-API
wait) lets every other Python thread run, and Request.cancel() may be called from any thread.
"""
from __future__ import annotations

import asyncio
import ctypes
import os
import threading
import weakref
from ctypes import POINTER, byref, c_float, c_int32, c_int64, c_void_p
from dataclasses import dataclass, fields
from typing import (TYPE_CHECKING, Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List,
                    Optional, Tuple, Type, TypeVar, Union)

import numpy as np

from . import _capi
from ._capi import lib
from .errors import CosyError, FileNotFound, check

if TYPE_CHECKING:
    import numpy.typing as npt

    FloatArray = npt.NDArray[np.float32]
    StrPath = Union[str, "os.PathLike[str]"]
    _R = TypeVar("_R", "EngineStats", "RequestStats", "TextMark")

# the mode names: the C header's spelling with '_' (COSY_MODE_CROSS_LINGUAL) and the command line's
# with '-' (cosyvoice-say --mode cross-lingual) are one name
MODES: Dict[str, int] = {"zero_shot": _capi.MODE_ZERO_SHOT,
                         "cross_lingual": _capi.MODE_CROSS_LINGUAL,
                         "instruct": _capi.MODE_INSTRUCT}
_MODES = MODES   # the name this module used before

# default most samples one read returns: more than the largest engine chunk (100 speech tokens =
# 4 s of audio; 192000 samples at 48 kHz), so one read normally hands over one whole chunk
DEFAULT_READ_SAMPLES = 1 << 18


def parse_mode(mode: Union[int, str]) -> int:
    """The COSY_MODE_* number of a synthesis mode: a number (MODE_ZERO_SHOT, MODE_CROSS_LINGUAL,
    MODE_INSTRUCT) or a name, with '_' or '-' and in any case: 'zero_shot' / 'zero-shot',
    'cross_lingual' / 'cross-lingual', 'instruct'. Raises ValueError naming the accepted names
    (TypeError for anything but an int or a str). The command line and the speech server use it
    too, so every front door takes the same spellings."""
    if isinstance(mode, bool) or not isinstance(mode, (int, str)):
        raise TypeError(f"mode must be an int (MODE_*) or a name, not {type(mode).__name__}")
    if isinstance(mode, int):
        if mode not in MODES.values():
            raise ValueError(f"mode {mode}: expected one of {sorted(MODES.values())} "
                             f"({', '.join(sorted(MODES))})")
        return mode
    key = mode.strip().lower().replace("-", "_")
    if key not in MODES:
        raise ValueError(f"mode {mode!r}: expected one of zero-shot, cross-lingual, instruct "
                         f"('_' in place of '-' works too)")
    return MODES[key]


def mode_name(mode: Union[int, str]) -> str:
    """The name of a mode with '-' ('zero-shot', 'cross-lingual', 'instruct'), as the command
    line writes it; any spelling parse_mode accepts."""
    n = parse_mode(mode)
    return next(k for k, v in MODES.items() if v == n).replace("_", "-")


def version() -> Tuple[int, str]:
    """(version number, version string) of the loaded library, e.g. (100, '0.1.0 (cpu only)')."""
    return lib().cosy_version_number(), lib().cosy_version_string().decode()


def _enc(s: Union[str, bytes]) -> bytes:
    return s.encode("utf-8") if isinstance(s, str) else bytes(s)


def _f32(a: Any, what: str) -> FloatArray:
    """a as a C-contiguous float32 1-D array (a copy only when needed)."""
    arr = np.ascontiguousarray(np.asarray(a, dtype=np.float32))
    if arr.ndim != 1:
        raise ValueError(f"{what} must be one-dimensional (mono); got shape {arr.shape}")
    return arr


def _fptr(arr: FloatArray) -> Any:
    return arr.ctypes.data_as(POINTER(c_float))


def _take_floats(ptr: Any, n: int) -> FloatArray:
    """Copy n floats out of library memory into a numpy array and cosy_free the memory."""
    try:
        if n > 0:
            return np.ctypeslib.as_array(ptr, shape=(n,)).copy()
        return np.zeros(0, dtype=np.float32)
    finally:
        lib().cosy_free(ptr)


def make_params(mode: Union[int, str] = _capi.MODE_ZERO_SHOT, seed: int = 0, sample_rate: int = 0,
                instruct_text: Optional[str] = None, speed: float = 0.0, temperature: float = 0.0,
                top_p: float = 0.0, top_k: int = 0, first_chunk_tokens: int = 0,
                max_tokens: int = 0, min_tokens: int = 0, flags: int = 0,
                text_normalization: bool = True, text_stream: bool = False) -> _capi.SynthParams:
    """A cosy_synth_params filled by cosy_synth_params_init, then these fields (0 = the library's
    default; the library checks the ranges). mode: an int (MODE_*) or a name parse_mode accepts
    ('zero-shot' or 'zero_shot', 'cross-lingual' or 'cross_lingual', 'instruct'). text_stream:
    the text is pushed (Request.push_text), see Engine.stream_text."""
    mode = parse_mode(mode)
    p = _capi.SynthParams()
    lib().cosy_synth_params_init(byref(p), ctypes.sizeof(p))
    p.mode = mode
    p.seed = seed
    p.sample_rate = sample_rate
    p.flags = flags | (0 if text_normalization else _capi.SYNTH_NO_TEXT_NORMALIZATION)
    if text_stream:
        p.flags |= _capi.SYNTH_TEXT_STREAM
    p.instruct_text = _enc(instruct_text) if instruct_text is not None else None
    p.speed, p.temperature, p.top_p, p.top_k = speed, temperature, top_p, top_k
    p.first_chunk_tokens, p.max_tokens, p.min_tokens = first_chunk_tokens, max_tokens, min_tokens
    return p


def _params(params: Optional[_capi.SynthParams], kw: Dict[str, Any]) -> _capi.SynthParams:
    if params is not None and kw:
        raise TypeError("give either params or keyword arguments, not both")
    return params if params is not None else make_params(**kw)


def audio_to_mel(pcm: Any, sample_rate: int) -> FloatArray:
    """The 80-bin prompt mel of mono audio at any rate in [16000, 192000]: float32 [frames, 80]."""
    a = _f32(pcm, "pcm")
    mel = POINTER(c_float)()
    frames = c_int32()
    check(lib().cosy_audio_to_mel(_fptr(a), a.size, int(sample_rate), byref(mel), byref(frames)),
          "cosy_audio_to_mel")
    return _take_floats(mel, frames.value * _capi.MEL_BINS).reshape(frames.value, _capi.MEL_BINS)


def _stats_record(cls: Type[_R], cstruct: Any) -> _R:
    return cls(**{f.name: getattr(cstruct, f.name) for f in fields(cls)})


@dataclass(frozen=True)
class EngineStats:
    """cosy_engine_stats (see the header for each field)."""
    weights_bytes: int
    kv_bytes: int
    workspace_bytes: int
    device_bytes_total: int
    kv_pages_total: int
    kv_pages_used: int
    active: int
    queued: int
    requests_done: int
    audio_samples_out: int
    llm_steps: int
    llm_step_rows: int
    flow_calls: int
    flow_jobs: int
    vocoder_calls: int
    vocoder_jobs: int
    flow_pages_total: int
    flow_pages_used: int


@dataclass(frozen=True)
class RequestStats:
    """cosy_request_stats (see the header for each field)."""
    ttfb_s: float
    total_s: float
    llm_s: float
    flow_s: float
    vocoder_s: float
    n_samples: int
    n_text_tokens: int
    n_speech_tokens: int
    n_chunks: int
    done: int


@dataclass(frozen=True)
class TextMark:
    """cosy_text_mark: where the speech for a unit of a request's text (a sentence, or a word
    without text normalization) can start. text_begin / text_end are UTF-8 byte offsets into the
    concatenation of every piece pushed (the text given to submit included); sample is the
    output sample (at the request's rate) of the first speech token generated after the unit's
    text entered the LLM: a lower bound of where it is heard (-1 while not fed yet; for good
    when the request ended first). include/cosyvoice.h and docs/scheduler.md section 7 say
    exactly what it means."""
    text_begin: int
    text_end: int
    sample: int
    text_token: int
    speech_token: int


class Engine:
    """Weights, device and scheduler (cosy_engine); thread-safe. close() or `with` destroys it;
    its voices are released first (the C API wants that order); requests may outlive it (they end
    with Cancelled)."""

    def __init__(self, model_path: StrPath, device: int = _capi.DEVICE_CPU,
                 gpu_memory_fraction: float = 0.0, max_active: int = 0, max_queued: int = 0,
                 cpu_threads: int = 0, first_chunk_wait_max: int = 0, log_level: int = 0,
                 log: Optional[Callable[[int, str], None]] = None, vocoder_precision: int = 0,
                 batch_invariant: bool = False) -> None:
        """Load the model file model_path (cosy_engine_create) on device (DEVICE_CPU = -1, or a
        CUDA ordinal); 0 in a number means the library's default (cosyvoice.h). A model file
        that does not exist raises FileNotFound (a FileNotFoundError and an IOError_).
        log: None, or a callable(level, message) called from engine threads.
        vocoder_precision: 0 (default: VOCODER_FP16, fp16 operands and fp32 sums with a TF32
        recompute of any job beyond fp16's range), VOCODER_TF32 or VOCODER_ACCURATE (fp32-level
        GPU vocoder); cosyvoice.h says what each changes.
        batch_invariant: COSY_ENGINE_BATCH_INVARIANT, require that a request's tokens do not
        depend on the other requests of its batches (the GPU engine's default where the device
        and model allow it; with the flag, creation fails where they do not)."""
        self._h: Optional[c_void_p] = None
        self._voices: "weakref.WeakSet[Voice]" = weakref.WeakSet()
        cfg = _capi.EngineConfig()
        lib().cosy_engine_config_init(byref(cfg), ctypes.sizeof(cfg))
        cfg.model_path = os.fsencode(model_path)
        cfg.device = int(device)
        cfg.gpu_memory_fraction = gpu_memory_fraction
        cfg.max_active, cfg.max_queued, cfg.cpu_threads = max_active, max_queued, cpu_threads
        cfg.first_chunk_wait_max = first_chunk_wait_max
        cfg.vocoder_precision = vocoder_precision
        cfg.flags = _capi.ENGINE_BATCH_INVARIANT if batch_invariant else 0
        cfg.log_level = log_level
        if log is not None:
            def _log(_user: Any, level: int, msg: bytes) -> None:
                try:
                    log(level, msg.decode("utf-8", "replace"))
                except Exception:   # an exception cannot cross into C; the log line is lost
                    pass
            self._log_fn = _capi.LOG_FN(_log)   # kept alive as long as the engine
            cfg.log_fn = self._log_fn
        h = c_void_p()
        st = lib().cosy_engine_create(byref(cfg), byref(h))
        if st == _capi.ERR_IO and not os.path.exists(model_path):
            raise FileNotFound(st, _capi.last_error(), "cosy_engine_create", model_path)
        check(st, "cosy_engine_create")
        self._h = h
        self.model_path = os.fspath(model_path)
        self.device = int(device)

    @property
    def handle(self) -> c_void_p:
        """The cosy_engine pointer (ValueError once closed)."""
        if not self._h:
            raise ValueError("engine is closed")
        return self._h

    @property
    def closed(self) -> bool:
        """True after close()."""
        return not self._h

    def close(self) -> None:
        """Release the engine's voices, then destroy it (cosy_engine_destroy); idempotent."""
        h = getattr(self, "_h", None)
        if h:
            for v in list(self._voices):
                v.close()
            self._h = None
            lib().cosy_engine_destroy(h)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:   # at interpreter exit module globals may be gone
            pass

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def sample_rate(self) -> int:
        """The model's native output rate (24000)."""
        return int(lib().cosy_engine_sample_rate(self.handle))

    def stats(self) -> EngineStats:
        """The engine's counters now (cosy_engine_get_stats)."""
        s = _capi.EngineStatsC()
        lib().cosy_engine_stats_init(byref(s), ctypes.sizeof(s))
        check(lib().cosy_engine_get_stats(self.handle, byref(s)), "cosy_engine_get_stats")
        return _stats_record(EngineStats, s)

    def info(self) -> Dict[str, Any]:
        """The engine's effective settings (cosy_engine_get_info) as a dict: backend, device,
        device_name, max_active, max_queued, memory budget and plan, pages, ... (see the header
        for each field)."""
        s = _capi.EngineInfoC()
        lib().cosy_engine_info_init(byref(s), ctypes.sizeof(s))
        check(lib().cosy_engine_get_info(self.handle, byref(s)), "cosy_engine_get_info")
        out: Dict[str, Any] = {}
        for field in _capi.EngineInfoC._fields_:
            name = field[0]
            if name in ("struct_size", "reserved"):
                continue
            v = getattr(s, name)
            out[name] = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        return out

    # ---- voices --------------------------------------------------------------------------------
    def load_voice(self, path: StrPath) -> Voice:
        """A voice file (Voice.load)."""
        return Voice.load(self, path)

    def voice_from_features(self, speech_tokens: Any, mel: Any, speaker_embedding: Any,
                            prompt_text: str = "") -> Voice:
        """A voice from precomputed features (Voice.from_features)."""
        return Voice.from_features(self, speech_tokens, mel, speaker_embedding, prompt_text)

    def voice_from_audio(self, pcm: Any, sample_rate: int, transcript: str = "") -> Voice:
        """A voice cloned from mono float audio and its transcript (Voice.from_audio)."""
        return Voice.from_audio(self, pcm, sample_rate, transcript)

    def voice_from_wav(self, path: StrPath, transcript: str = "") -> Voice:
        """A voice cloned from a WAV file (read_wav) and its transcript (Voice.from_audio)."""
        from .audio import read_wav
        pcm, rate = read_wav(path)
        return Voice.from_audio(self, pcm, rate, transcript)

    # ---- synthesis -----------------------------------------------------------------------------
    def synthesize(self, voice: Voice, text: str, params: Optional[_capi.SynthParams] = None,
                   **kw: Any) -> FloatArray:
        """Blocking: the whole utterance as float32 numpy array. params: a SynthParams from
        make_params(), or make_params' keywords (seed=..., speed=..., sample_rate=...)."""
        p = _params(params, kw)
        pcm = POINTER(c_float)()
        n = c_int64()
        check(lib().cosy_synthesize(self.handle, voice.handle, _enc(text), byref(p), byref(pcm),
                                    byref(n)), "cosy_synthesize")
        return _take_floats(pcm, n.value)

    def submit(self, voice: Voice, text: Optional[str],
               params: Optional[_capi.SynthParams] = None, **kw: Any) -> Request:
        """Start a pull-streaming request (cosy_request_submit without a callback). The text is
        normalized and tokenized on the calling thread before this returns (about 6 ms per 1,000
        characters; the GIL is released meanwhile): from asyncio, call it through
        asyncio.to_thread."""
        p = _params(params, kw)
        h = c_void_p()
        check(lib().cosy_request_submit(self.handle, voice.handle,
                                        _enc(text) if text is not None else None, byref(p),
                                        _capi.CHUNK_FN(), None, byref(h)), "cosy_request_submit")
        return Request(h, p.sample_rate or self.sample_rate)

    def submit_text_stream(self, voice: Voice, params: Optional[_capi.SynthParams] = None,
                           **kw: Any) -> Request:
        """Start a request whose text is pushed later (COSY_SYNTH_TEXT_STREAM): call
        Request.push_text(piece) any number of times, then Request.end_text(), and read the
        audio meanwhile (the same Request may be read on one thread and pushed on another)."""
        p = _params(params, kw)
        p.flags |= _capi.SYNTH_TEXT_STREAM
        return self.submit(voice, None, p)

    def stream_text(self, voice: Voice, pieces: Iterable[str],
                    params: Optional[_capi.SynthParams] = None, **kw: Any) -> Iterator[FloatArray]:
        """Text in, audio out: pieces is any iterable of str (e.g. the words a chat model
        produces, possibly slowly); a thread pushes them while this iterator yields float32
        chunks. The audio depends only on the joined text, not on how it is cut."""
        import threading
        with self.submit_text_stream(voice, params, **kw) as r:
            err: List[BaseException] = []

            def pusher() -> None:
                try:
                    for piece in pieces:
                        r.push_text(piece)
                    r.end_text()
                except BaseException as e:  # noqa: BLE001 (re-raised on the reading thread)
                    err.append(e)
                    r.cancel()

            t = threading.Thread(target=pusher, daemon=True)
            t.start()
            try:
                yield from r
            except CosyError:
                t.join()
                if err:
                    raise err[0]
                raise
            t.join()
            if err:
                raise err[0]

    def stream(self, voice: Voice, text: str, params: Optional[_capi.SynthParams] = None,
               **kw: Any) -> Iterator[FloatArray]:
        """Iterator of float32 chunks, read on the calling thread (the GIL is released while it
        waits). The request is released at the end, or when the iterator is closed early (which
        cancels it)."""
        with self.submit(voice, text, params, **kw) as r:
            yield from r

    async def astream(self, voice: Voice, text: str, params: Optional[_capi.SynthParams] = None,
                      **kw: Any) -> AsyncIterator[FloatArray]:
        """Async iterator of float32 chunks: a reader thread pulls them (Request.achunks). If the
        consumer stops early (break, task cancelled) the request is cancelled and released."""
        r = self.submit(voice, text, params, **kw)
        try:
            async for c in r.achunks():
                yield c
        finally:
            r.close_when_idle()


class Voice:
    """A speaker (cosy_voice): immutable, shareable between requests and threads. close()
    releases it (running requests keep it alive); its engine's close() releases it too."""

    def __init__(self, handle: c_void_p, engine: Engine) -> None:
        """Wrap a cosy_voice handle of engine (use the class methods or Engine's voice_*)."""
        self._h: Optional[c_void_p] = handle
        self._engine = engine   # a voice keeps its engine alive
        engine._voices.add(self)

    @classmethod
    def load(cls, engine: Engine, path: StrPath) -> Voice:
        """A voice file written by save() or cosyvoice-say --save-voice (cosy_voice_load); one
        that does not exist raises FileNotFound (a FileNotFoundError)."""
        h = c_void_p()
        st = lib().cosy_voice_load(engine.handle, os.fsencode(path), byref(h))
        if st == _capi.ERR_IO and not os.path.exists(path):
            raise FileNotFound(st, _capi.last_error(), "cosy_voice_load", path)
        check(st, "cosy_voice_load")
        return cls(h, engine)

    @classmethod
    def from_features(cls, engine: Engine, speech_tokens: Any, mel: Any, speaker_embedding: Any,
                      prompt_text: str = "") -> Voice:
        """speech_tokens: ints in [0, 6561); mel: [frames, 80] (or flat frame-major) natural-log
        mel at 50 Hz; speaker_embedding: 192 floats. The library copies everything."""
        tok = np.ascontiguousarray(np.asarray(speech_tokens, dtype=np.int64))
        if tok.ndim != 1:
            raise ValueError(f"speech_tokens must be one-dimensional; got shape {tok.shape}")
        if tok.size and (tok.min() < np.iinfo(np.int32).min or tok.max() > np.iinfo(np.int32).max):
            raise ValueError("speech_tokens do not fit in int32")
        tok = tok.astype(np.int32)
        m = np.ascontiguousarray(np.asarray(mel, dtype=np.float32))
        if m.ndim == 1:
            if m.size % _capi.MEL_BINS:
                raise ValueError(f"a flat mel must hold a multiple of 80 values; got {m.size}")
        elif m.ndim != 2 or m.shape[1] != _capi.MEL_BINS:
            raise ValueError(f"mel must be [frames, 80]; got shape {m.shape}")
        m = m.reshape(-1)
        spk = _f32(speaker_embedding, "speaker_embedding")
        f = _capi.VoiceFeatures()
        lib().cosy_voice_features_init(byref(f), ctypes.sizeof(f))
        f.prompt_text = _enc(prompt_text or "")
        if tok.size:
            f.speech_tokens = tok.ctypes.data_as(POINTER(c_int32))
        f.n_speech_tokens = tok.size
        if m.size:
            f.mel = _fptr(m)
        f.n_mel_frames = m.size // _capi.MEL_BINS
        if spk.size:
            f.speaker_embedding = _fptr(spk)
        f.speaker_dim = spk.size
        h = c_void_p()
        check(lib().cosy_voice_from_features(engine.handle, byref(f), byref(h)),
              "cosy_voice_from_features")
        return cls(h, engine)

    @classmethod
    def from_audio(cls, engine: Engine, pcm: Any, sample_rate: int, transcript: str = "") -> Voice:
        """Clone a voice from a recording (cosy_voice_from_audio): mono float audio in [-1, 1],
        0.5..30 s at 16..192 kHz; the model file needs the front-end models (else Unsupported)."""
        a = _f32(pcm, "pcm")
        h = c_void_p()
        check(lib().cosy_voice_from_audio(engine.handle, _fptr(a), a.size, int(sample_rate),
                                          _enc(transcript or ""), byref(h)),
              "cosy_voice_from_audio")
        return cls(h, engine)

    @property
    def handle(self) -> c_void_p:
        """The cosy_voice pointer (ValueError once closed)."""
        if not self._h:
            raise ValueError("voice is closed")
        return self._h

    def save(self, path: StrPath) -> None:
        """Write the voice to a file for load() (cosy_voice_save)."""
        check(lib().cosy_voice_save(self.handle, os.fsencode(path)), "cosy_voice_save")

    def close(self) -> None:
        """Release the voice (cosy_voice_release); idempotent."""
        h = getattr(self, "_h", None)
        if h:
            self._h = None
            lib().cosy_voice_release(h)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self) -> "Voice":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Request:
    """One utterance in flight, pulled (cosy_request_read). Iterating yields float32 chunks until
    the end; a failure raises from the iteration (Cancelled after cancel()). cancel() may be
    called from any thread; everything else from one thread at a time. close() releases it
    (cancelling it when still running)."""

    def __init__(self, handle: c_void_p, sample_rate: int) -> None:
        """Wrap a cosy_request handle whose audio comes at sample_rate (use Engine.submit)."""
        self._h: Optional[c_void_p] = handle
        self.sample_rate = sample_rate
        self._mu = threading.Lock()
        self._reader: Optional[threading.Thread] = None   # the achunks() thread while it runs
        self._close_after_read = False

    @property
    def handle(self) -> c_void_p:
        """The cosy_request pointer (ValueError once closed)."""
        if not self._h:
            raise ValueError("request is closed")
        return self._h

    def read(self, max_samples: int = DEFAULT_READ_SAMPLES,
             timeout: Optional[float] = None) -> FloatArray:
        """The samples available now, up to max_samples, waiting for some when there are none
        (timeout in seconds; None = until the request ends). An empty array means the utterance
        is finished; a failure raises its typed error (Timeout when nothing came in time)."""
        if max_samples <= 0:
            raise ValueError(f"max_samples must be positive; got {max_samples}")
        if timeout is None:
            ms = -1
        else:
            if timeout < 0:
                raise ValueError(f"timeout must be >= 0 seconds or None; got {timeout}")
            ms = min(int(timeout * 1000), 2**31 - 1)
        buf = np.empty(max_samples, dtype=np.float32)
        n = c_int64()
        st = lib().cosy_request_read(self.handle, _fptr(buf), max_samples, byref(n), ms)
        check(st, "cosy_request_read")
        k = n.value
        return buf if k == max_samples else buf[:k].copy()

    def __iter__(self) -> Iterator[FloatArray]:
        """The chunks until the end (read() until it returns an empty array)."""
        while True:
            c = self.read()
            if c.size == 0:
                return
            yield c

    chunks = __iter__

    async def achunks(self, max_samples: int = DEFAULT_READ_SAMPLES) -> AsyncIterator[FloatArray]:
        """Async iterator of float32 chunks. A reader thread blocks in cosy_request_read (no GIL
        held while it waits) and hands each chunk to the event loop, so the loop never blocks.
        If the consumer stops early the request is cancelled; the reader thread then ends at the
        engine's next step."""
        loop = asyncio.get_running_loop()
        q: "asyncio.Queue[Any]" = asyncio.Queue()
        done = object()

        def put(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(q.put_nowait, item)
            except RuntimeError:   # the loop is closed: nobody is listening any more
                pass

        def reader() -> None:
            try:
                while True:
                    c = self.read(max_samples)
                    if c.size == 0:
                        put(done)
                        return
                    put(c)
            except BaseException as e:   # handed to the consumer
                put(e)
            finally:
                with self._mu:
                    self._reader = None
                    close = self._close_after_read
                if close:
                    self.close()

        with self._mu:
            if self._reader is not None:
                raise RuntimeError("this request is already being read by achunks()")
            self._reader = threading.Thread(target=reader, name="cosyvoice-reader", daemon=True)
            self._reader.start()
        finished = False
        try:
            while True:
                item = await q.get()
                if item is done:
                    finished = True
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                yield item
        finally:
            if not finished:
                self.cancel()

    def close_when_idle(self) -> None:
        """Release the request now, or, while an achunks() reader thread still runs, when that
        thread ends (after cancelling the request). Never blocks."""
        with self._mu:
            if self._reader is not None:
                self._close_after_read = True
                busy = True
            else:
                busy = False
        if busy:
            self.cancel()
        else:
            self.close()

    def push_text(self, text: str) -> None:
        """Text streaming: append a piece of the text (cosy_request_push_text)."""
        check(lib().cosy_request_push_text(self.handle, _enc(text)), "cosy_request_push_text")

    def end_text(self) -> None:
        """Text streaming: no more text (cosy_request_end_text)."""
        check(lib().cosy_request_end_text(self.handle), "cosy_request_end_text")

    def text_marks(self, first: int = 0) -> List[TextMark]:
        """The request's marks from index first on (cosy_request_text_marks): one per committed
        unit of its text, in order; units only get appended and a sample, once set (>= 0),
        never changes, so poll this as the audio plays. Any thread."""
        h = self.handle
        n = c_int32(0)
        check(lib().cosy_request_text_marks(h, first, None, 0, byref(n)), "cosy_request_text_marks")
        while True:
            cap = max(n.value - first, 0) + 8   # room for units committed meanwhile
            arr = (_capi.TextMarkC * cap)()
            lib().cosy_text_mark_init(arr, ctypes.sizeof(_capi.TextMarkC))
            check(lib().cosy_request_text_marks(h, first, arr, cap, byref(n)),
                  "cosy_request_text_marks")
            got = max(min(n.value - first, cap), 0)
            if got < cap or n.value - first == cap:
                return [_stats_record(TextMark, arr[i]) for i in range(got)]

    def cancel(self) -> None:
        """Stop the request soon (cosy_request_cancel); any thread, any time; reads then raise
        Cancelled."""
        h = self._h
        if h:
            lib().cosy_request_cancel(h)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait for the end (seconds; None = forever); raises the request's error, or Timeout."""
        ms = -1 if timeout is None else min(int(timeout * 1000), 2**31 - 1)
        check(lib().cosy_request_wait(self.handle, ms), "cosy_request_wait")

    def stats(self) -> RequestStats:
        """The request's times and counts so far (cosy_request_get_stats)."""
        s = _capi.RequestStatsC()
        lib().cosy_request_stats_init(byref(s), ctypes.sizeof(s))
        check(lib().cosy_request_get_stats(self.handle, byref(s)), "cosy_request_get_stats")
        return _stats_record(RequestStats, s)

    def close(self) -> None:
        """Release the request (cancelling it when still running); idempotent. Not while
        achunks() reads: use close_when_idle()."""
        with self._mu:
            if self._reader is not None and self._reader is not threading.current_thread():
                raise RuntimeError("close() while achunks() reads: use close_when_idle()")
            h, self._h = getattr(self, "_h", None), None
        if h:
            lib().cosy_request_release(h)

    def __del__(self) -> None:
        try:
            self.close_when_idle()
        except Exception:
            pass

    def __enter__(self) -> "Request":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
