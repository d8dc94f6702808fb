"""cosyvoice.py - libcosyvoice from Python through ctypes (standard library only, no compiled
extension).

    import cosyvoice
    with cosyvoice.Engine("model.gguf") as eng, eng.load_voice("voice.gguf") as voice:
        pcm = eng.synthesize(voice, "Hello.", seed=42)           # array('f'), 24 kHz
        for chunk in eng.stream(voice, "Hello again.", seed=42):  # pull streaming
            play(chunk)

The shared library is found, in this order, through
  1. $COSYVOICE_LIB (a path to libcosyvoice.so.0 or any file name dlopen accepts);
  2. ctypes.util.find_library("cosyvoice") (ldconfig cache, LD_LIBRARY_PATH, the linker's path);
  3. `pkg-config --variable=libdir cosyvoice` (so PKG_CONFIG_PATH works as for C programs).

Every function the library exports has its argtypes and restype declared below (see _PROTOS;
test_cosyvoice.py checks this against abi/cosyvoice.symbols). Versioned structs get their
struct_size from ctypes.sizeof of the Structure mirrored here, through the library's own *_init.

Errors raise CosyError(status, message), the message being cosy_last_error() read on the same
thread right after the failing call. Samples are array.array('f') (float32, mono, [-1, 1]).

ctypes releases the GIL during every library call, so Request.cancel() may be called from
another Python thread while one is blocked in a read.
"""
import array
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
import weakref
from ctypes import (CFUNCTYPE, POINTER, Structure, byref, c_char_p, c_double, c_float, c_int32,
                    c_int64, c_uint32, c_uint64, c_void_p)

# ---- status codes (pinned by the C header) ------------------------------------------------------
OK = 0
ERR_INVALID_ARG = 1
ERR_STRUCT_SIZE = 2
ERR_NO_MEMORY = 3
ERR_GPU_NO_MEMORY = 4
ERR_CUDA = 5
ERR_DEVICE_LOST = 6
ERR_IO = 7
ERR_MODEL_FORMAT = 8
ERR_MODEL_VERSION = 9
ERR_UNSUPPORTED = 10
ERR_CANCELLED = 11
ERR_TIMEOUT = 12
ERR_QUEUE_FULL = 13
ERR_TEXT = 14
ERR_INTERNAL = 99

DEVICE_CPU = -1
MODE_ZERO_SHOT, MODE_CROSS_LINGUAL, MODE_INSTRUCT = 0, 1, 2
SYNTH_NO_TEXT_NORMALIZATION = 0x1
CHUNK_LAST = 0x1
LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3


# ---- structs (mirrors of cosyvoice.h, field for field) ------------------------------------------
LOG_FN = CFUNCTYPE(None, c_void_p, c_int32, c_char_p)


class EngineConfig(Structure):
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("model_path", c_char_p),
                ("device", c_int32), ("gpu_memory_fraction", c_float), ("max_active", c_int32),
                ("max_queued", c_int32), ("cpu_threads", c_int32), ("log_level", c_int32),
                ("log_fn", LOG_FN), ("log_user", c_void_p),
                ("first_chunk_wait_max", c_int32), ("reserved3", c_int32)]


class EngineStats(Structure):
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32), ("weights_bytes", c_int64),
                ("kv_bytes", c_int64), ("workspace_bytes", c_int64),
                ("device_bytes_total", c_int64), ("kv_pages_total", c_int32),
                ("kv_pages_used", c_int32), ("active", c_int32), ("queued", c_int32),
                ("requests_done", c_int64), ("audio_samples_out", c_int64),
                ("llm_steps", c_int64), ("llm_step_rows", c_int64), ("flow_calls", c_int64),
                ("flow_jobs", c_int64), ("vocoder_calls", c_int64), ("vocoder_jobs", c_int64),
                ("flow_pages_total", c_int32), ("flow_pages_used", c_int32)]


class VoiceFeatures(Structure):
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32), ("prompt_text", c_char_p),
                ("speech_tokens", POINTER(c_int32)), ("n_speech_tokens", c_int32),
                ("n_mel_frames", c_int32), ("mel", POINTER(c_float)),
                ("speaker_embedding", POINTER(c_float)), ("speaker_dim", c_int32),
                ("reserved2", c_int32)]


class SynthParams(Structure):
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("mode", c_int32),
                ("sample_rate", c_int32), ("instruct_text", c_char_p), ("speed", c_float),
                ("temperature", c_float), ("top_p", c_float), ("top_k", c_int32),
                ("seed", c_uint64), ("first_chunk_tokens", c_int32), ("max_tokens", c_int32),
                ("min_tokens", c_int32), ("reserved", c_int32)]


class Chunk(Structure):
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("pcm", POINTER(c_float)),
                ("n_samples", c_int64), ("offset", c_int64), ("sample_rate", c_int32),
                ("reserved", c_int32)]


class RequestStats(Structure):
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32), ("ttfb_s", c_double),
                ("total_s", c_double), ("llm_s", c_double), ("flow_s", c_double),
                ("vocoder_s", c_double), ("n_samples", c_int64), ("n_text_tokens", c_int32),
                ("n_speech_tokens", c_int32), ("n_chunks", c_int32), ("done", c_int32)]


# the C type names, for the layout check in test_cosyvoice.py
STRUCTS = {"cosy_engine_config": EngineConfig, "cosy_engine_stats": EngineStats,
           "cosy_voice_features": VoiceFeatures, "cosy_synth_params": SynthParams,
           "cosy_chunk": Chunk, "cosy_request_stats": RequestStats}

CHUNK_FN = CFUNCTYPE(c_int32, c_void_p, POINTER(Chunk))

_p = c_void_p   # opaque handles
_status = c_int32
# name: (restype, argtypes) for every exported function
_PROTOS = {
    "cosy_version_number": (c_uint32, []),
    "cosy_version_string": (c_char_p, []),
    "cosy_status_str": (c_char_p, [_status]),
    "cosy_last_error": (c_char_p, []),
    "cosy_engine_config_init": (None, [POINTER(EngineConfig), c_uint32]),
    "cosy_engine_create": (_status, [POINTER(EngineConfig), POINTER(_p)]),
    "cosy_engine_destroy": (None, [_p]),
    "cosy_engine_sample_rate": (c_int32, [_p]),
    "cosy_engine_stats_init": (None, [POINTER(EngineStats), c_uint32]),
    "cosy_engine_get_stats": (_status, [_p, POINTER(EngineStats)]),
    "cosy_voice_load": (_status, [_p, c_char_p, POINTER(_p)]),
    "cosy_voice_save": (_status, [_p, c_char_p]),
    "cosy_voice_features_init": (None, [POINTER(VoiceFeatures), c_uint32]),
    "cosy_voice_from_features": (_status, [_p, POINTER(VoiceFeatures), POINTER(_p)]),
    "cosy_voice_from_audio": (_status, [_p, POINTER(c_float), c_int64, c_int32, c_char_p,
                                        POINTER(_p)]),
    "cosy_audio_to_mel": (_status, [POINTER(c_float), c_int64, c_int32,
                                    POINTER(POINTER(c_float)), POINTER(c_int32)]),
    "cosy_voice_release": (None, [_p]),
    "cosy_synth_params_init": (None, [POINTER(SynthParams), c_uint32]),
    "cosy_synthesize": (_status, [_p, _p, c_char_p, POINTER(SynthParams),
                                  POINTER(POINTER(c_float)), POINTER(c_int64)]),
    "cosy_request_submit": (_status, [_p, _p, c_char_p, POINTER(SynthParams), CHUNK_FN, c_void_p,
                                      POINTER(_p)]),
    "cosy_request_read": (_status, [_p, POINTER(c_float), c_int64, POINTER(c_int64), c_int32]),
    "cosy_request_stats_init": (None, [POINTER(RequestStats), c_uint32]),
    "cosy_request_get_stats": (_status, [_p, POINTER(RequestStats)]),
    "cosy_request_cancel": (None, [_p]),
    "cosy_request_wait": (_status, [_p, c_int32]),
    "cosy_request_release": (None, [_p]),
    "cosy_free": (None, [c_void_p]),
}


# ---- finding and loading the library ------------------------------------------------------------
def _pkg_config_libdir():
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--variable=libdir", "cosyvoice"], capture_output=True,
                             text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return out or None


def find_library():
    """Path (or name) of libcosyvoice to load; raises OSError when it cannot be found."""
    env = os.environ.get("COSYVOICE_LIB")
    if env:
        return env
    name = ctypes.util.find_library("cosyvoice")
    if name:
        return name
    libdir = _pkg_config_libdir()
    if libdir:
        for cand in ("libcosyvoice.so.0", "libcosyvoice.so", "libcosyvoice.dylib"):
            path = os.path.join(libdir, cand)
            if os.path.exists(path):
                return path
    raise OSError("libcosyvoice not found: set COSYVOICE_LIB to its path, install it where the "
                  "dynamic linker looks, or make `pkg-config cosyvoice` work (PKG_CONFIG_PATH)")


def _load():
    lib = ctypes.CDLL(find_library())
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _load()


# ---- errors ---------------------------------------------------------------------------------------
class CosyError(Exception):
    """A failed call: .status is the cosy_status code, .message cosy_last_error()."""

    def __init__(self, status, message, where=""):
        self.status = status
        self.message = message
        self.where = where
        text = status_str(status)
        super().__init__(f"{where + ': ' if where else ''}{text} ({status}): {message}")


def status_str(status):
    return lib.cosy_status_str(status).decode()


def last_error():
    return lib.cosy_last_error().decode("utf-8", "replace")


def _check(status, where):
    if status != OK:
        raise CosyError(status, last_error(), where)


def version():
    """(version number, version string), e.g. (100, '0.1.0 (cpu only)')."""
    return lib.cosy_version_number(), lib.cosy_version_string().decode()


def _enc(s):
    return s.encode("utf-8") if isinstance(s, str) else s


def _path(p):
    return os.fsencode(p)


def _take_floats(ptr, n):
    """Copy n floats from library memory into an array('f') and cosy_free the memory."""
    out = array.array("f")
    try:
        if n > 0:
            out.frombytes(ctypes.string_at(ptr, n * 4))
    finally:
        lib.cosy_free(ptr)
    return out


def _float_buffer(values):
    """A ctypes float array holding values (any iterable / buffer of floats)."""
    a = array.array("f", values)
    return (c_float * len(a)).from_buffer(a) if len(a) else (c_float * 1)(), a


def make_params(mode=MODE_ZERO_SHOT, seed=0, sample_rate=0, instruct_text=None, speed=0.0,
                temperature=0.0, top_p=0.0, top_k=0, first_chunk_tokens=0, max_tokens=0,
                min_tokens=0, flags=0):
    """A SynthParams filled by cosy_synth_params_init, then these fields (0 = default)."""
    p = SynthParams()
    lib.cosy_synth_params_init(byref(p), ctypes.sizeof(SynthParams))
    p.mode, p.seed, p.sample_rate, p.flags = mode, seed, sample_rate, flags
    p.instruct_text = _enc(instruct_text) if instruct_text is not None else None
    p.speed, p.temperature, p.top_p, p.top_k = speed, temperature, top_p, top_k
    p.first_chunk_tokens, p.max_tokens, p.min_tokens = first_chunk_tokens, max_tokens, min_tokens
    return p


def audio_to_mel(pcm, sample_rate):
    """Prompt mel of mono audio: (array('f') of n_frames*80 values, n_frames)."""
    buf, keep = _float_buffer(pcm)
    mel = POINTER(c_float)()
    frames = c_int32()
    _check(lib.cosy_audio_to_mel(buf, len(keep), sample_rate, byref(mel), byref(frames)),
           "cosy_audio_to_mel")
    return _take_floats(mel, frames.value * 80), frames.value


def read_wav(path):
    """A RIFF/WAVE file of 16-bit PCM or 32-bit float samples (plain or WAVE_FORMAT_EXTENSIBLE) as
    (array('f') of mono samples in [-1, 1], channels mixed by their mean; sample rate). Stdlib
    only; other encodings raise ValueError naming them."""
    import struct
    with open(os.fspath(path), "rb") as f:
        b = f.read()
    if len(b) < 12 or b[0:4] != b"RIFF" or b[8:12] != b"WAVE":
        raise ValueError(f"{path}: not a RIFF/WAVE file")
    fmt = data = None
    off = 12
    while off + 8 <= len(b):
        cid, size = b[off:off + 4], struct.unpack_from("<I", b, off + 4)[0]
        body = b[off + 8:off + 8 + size]  # a truncated last chunk: what is there
        if cid == b"fmt " and len(body) >= 16:
            tag, ch, rate, _, _, bits = struct.unpack_from("<HHIIHH", body)
            if tag == 0xFFFE and len(body) >= 26:  # extensible: the sub-format's tag
                tag = struct.unpack_from("<H", body, 24)[0]
            fmt = (tag, ch, rate, bits)
        elif cid == b"data":
            data = body
        off += 8 + size + (size & 1)
    if fmt is None or data is None or fmt[1] == 0:
        raise ValueError(f"{path}: no fmt or data chunk")
    tag, ch, rate, bits = fmt
    if (tag, bits) == (1, 16):
        s, scale = array.array("h"), 1.0 / 32768.0
    elif (tag, bits) == (3, 32):
        s, scale = array.array("f"), 1.0
    else:
        raise ValueError(f"{path}: format {tag} with {bits}-bit samples; this reader takes 16-bit "
                         "PCM or 32-bit float")
    s.frombytes(data[:len(data) - len(data) % (s.itemsize * ch)])
    if sys.byteorder == "big":
        s.byteswap()
    if ch == 1:
        return array.array("f", (x * scale for x in s)), rate
    return array.array("f", (sum(s[i:i + ch]) * scale / ch for i in range(0, len(s), ch))), rate


def _quiet_close(obj):
    try:
        obj.close()
    except Exception:   # at interpreter exit the module's globals may already be gone
        pass


# ---- objects ----------------------------------------------------------------------------------------
class Engine:
    """Weights, device, scheduler; thread-safe. close() (or `with`) destroys it; release every
    Voice first."""

    def __init__(self, model_path, device=DEVICE_CPU, cpu_threads=0, max_active=0, max_queued=0):
        cfg = EngineConfig()
        lib.cosy_engine_config_init(byref(cfg), ctypes.sizeof(EngineConfig))
        cfg.model_path = _path(model_path)
        cfg.device = device
        cfg.cpu_threads = cpu_threads
        cfg.max_active = max_active
        cfg.max_queued = max_queued
        h = c_void_p()
        self._h = None
        self._voices = weakref.WeakSet()
        _check(lib.cosy_engine_create(byref(cfg), byref(h)), "cosy_engine_create")
        self._h = h

    @property
    def handle(self):
        if not self._h:
            raise ValueError("engine is closed")
        return self._h

    def close(self):
        if getattr(self, "_h", None):
            for v in list(self._voices):
                v.close()
            lib.cosy_engine_destroy(self._h)
            self._h = None

    def __del__(self):
        _quiet_close(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def sample_rate(self):
        return lib.cosy_engine_sample_rate(self.handle)

    def stats(self):
        s = EngineStats()
        lib.cosy_engine_stats_init(byref(s), ctypes.sizeof(EngineStats))
        _check(lib.cosy_engine_get_stats(self.handle, byref(s)), "cosy_engine_get_stats")
        return s

    def load_voice(self, path):
        return Voice.load(self, path)

    def voice_from_features(self, **kw):
        return Voice.from_features(self, **kw)

    def voice_from_audio(self, pcm, sample_rate, transcript=""):
        """Clone a voice from a recording (mono floats in [-1, 1], 0.5..30 s, 16..192 kHz)."""
        return Voice.from_audio(self, pcm, sample_rate, transcript)

    def voice_from_wav(self, path, transcript=""):
        """Clone a voice from a WAV file (16-bit PCM or 32-bit float; channels mixed by their
        mean)."""
        pcm, rate = read_wav(path)
        return Voice.from_audio(self, pcm, rate, transcript)

    def synthesize(self, voice, text, params=None, **kw):
        """Blocking: the whole utterance as array('f'). params: a SynthParams, or keywords of
        make_params (seed=..., max_tokens=..., ...)."""
        p = params if params is not None else make_params(**kw)
        pcm = POINTER(c_float)()
        n = c_int64()
        _check(lib.cosy_synthesize(self.handle, voice.handle, _enc(text), byref(p), byref(pcm),
                                   byref(n)), "cosy_synthesize")
        return _take_floats(pcm, n.value)

    def submit(self, voice, text, params=None, **kw):
        """Start a pull-streaming request (iterate it, or call read())."""
        p = params if params is not None else make_params(**kw)
        h = c_void_p()
        _check(lib.cosy_request_submit(self.handle, voice.handle, _enc(text), byref(p),
                                       CHUNK_FN(), None, byref(h)), "cosy_request_submit")
        return Request(h)

    def stream(self, voice, text, params=None, chunk=4800, **kw):
        """Generator of array('f') chunks (pull streaming); the request is released at the end or
        when the generator is closed."""
        with self.submit(voice, text, params, **kw) as r:
            yield from r.chunks(chunk)


class Voice:
    """A speaker (immutable). close() releases it; closing its Engine releases it too (the C API
    wants voices released before their engine), and a Voice keeps its Engine alive."""

    def __init__(self, handle, engine):
        self._h = handle
        self._engine = engine
        engine._voices.add(self)

    @classmethod
    def load(cls, engine, path):
        h = c_void_p()
        _check(lib.cosy_voice_load(engine.handle, _path(path), byref(h)), "cosy_voice_load")
        return cls(h, engine)

    @classmethod
    def from_features(cls, engine, speech_tokens, mel, speaker_embedding, prompt_text=""):
        """speech_tokens: ints in [0, 6561); mel: n_frames*80 floats (flat, frame-major, or a
        sequence of 80-float frames); speaker_embedding: 192 floats."""
        tok = array.array("i", speech_tokens)
        if tok.itemsize != 4:
            raise RuntimeError("array('i') is not 32-bit on this platform")
        flat = array.array("f")
        for row in mel:
            if isinstance(row, (int, float)):
                flat.append(row)
            else:
                flat.extend(row)
        if len(flat) % 80:
            raise ValueError("mel must hold a multiple of 80 values")
        spk = array.array("f", speaker_embedding)
        f = VoiceFeatures()
        lib.cosy_voice_features_init(byref(f), ctypes.sizeof(VoiceFeatures))
        f.prompt_text = _enc(prompt_text or "")
        if len(tok):
            f.speech_tokens = (c_int32 * len(tok)).from_buffer(tok)
        f.n_speech_tokens = len(tok)
        if len(flat):
            f.mel = (c_float * len(flat)).from_buffer(flat)
        f.n_mel_frames = len(flat) // 80
        if len(spk):
            f.speaker_embedding = (c_float * len(spk)).from_buffer(spk)
        f.speaker_dim = len(spk)
        h = c_void_p()
        _check(lib.cosy_voice_from_features(engine.handle, byref(f), byref(h)),
               "cosy_voice_from_features")   # the library copies the arrays
        return cls(h, engine)

    @classmethod
    def from_audio(cls, engine, pcm, sample_rate, transcript=""):
        """Clone a voice (cosy_voice_from_audio): pcm mono floats in [-1, 1]."""
        buf, keep = _float_buffer(pcm)
        h = c_void_p()
        _check(lib.cosy_voice_from_audio(engine.handle, buf, len(keep), sample_rate,
                                         _enc(transcript or ""), byref(h)), "cosy_voice_from_audio")
        return cls(h, engine)

    @property
    def handle(self):
        if not self._h:
            raise ValueError("voice is closed")
        return self._h

    def save(self, path):
        _check(lib.cosy_voice_save(self.handle, _path(path)), "cosy_voice_save")

    def close(self):
        if getattr(self, "_h", None):
            lib.cosy_voice_release(self._h)
            self._h = None

    def __del__(self):
        _quiet_close(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Request:
    """A pull-streaming utterance. Iterating yields array('f') chunks until the end; a failure
    (CosyError with status ERR_CANCELLED after cancel()) raises from the iteration. cancel() may be
    called from any thread. close() releases it (cancelling it if still running)."""

    def __init__(self, handle, chunk=4800):
        self._h = handle
        self._chunk = chunk

    @property
    def handle(self):
        if not self._h:
            raise ValueError("request is closed")
        return self._h

    def read(self, cap=4800, timeout_ms=-1):
        """Up to cap samples; an empty array means the utterance is finished. Raises CosyError
        (ERR_TIMEOUT when nothing arrived within timeout_ms >= 0)."""
        out = array.array("f", bytes(4 * cap))
        buf = (c_float * cap).from_buffer(out)
        n = c_int64()
        st = lib.cosy_request_read(self.handle, buf, cap, byref(n), timeout_ms)
        del buf
        _check(st, "cosy_request_read")
        del out[n.value:]
        return out

    def chunks(self, cap=None):
        cap = cap or self._chunk
        while True:
            c = self.read(cap)
            if not c:
                return
            yield c

    __iter__ = chunks

    def cancel(self):
        if self._h:
            lib.cosy_request_cancel(self._h)

    def wait(self, timeout_ms=-1):
        """Wait for the end; raises CosyError on failure, cancellation or timeout."""
        _check(lib.cosy_request_wait(self.handle, timeout_ms), "cosy_request_wait")

    def stats(self):
        s = RequestStats()
        lib.cosy_request_stats_init(byref(s), ctypes.sizeof(RequestStats))
        _check(lib.cosy_request_get_stats(self.handle, byref(s)), "cosy_request_get_stats")
        return s

    def close(self):
        if getattr(self, "_h", None):
            lib.cosy_request_release(self._h)
            self._h = None

    def __del__(self):
        _quiet_close(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
