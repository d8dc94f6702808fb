"""The C API of libcosyvoice through ctypes: constants, mirrors of the versioned structs, the
prototype of every exported function, and finding + loading the shared library.

The library is found, in this order, through
  1. $COSYVOICE_LIB: a path to libcosyvoice.so.0 (or any name dlopen accepts);
  2. the copy inside this package (cosyvoice/lib/libcosyvoice.so.0, put there by the package
     build: python/setup.py);
  3. `pkg-config --variable=libdir cosyvoice` (PKG_CONFIG_PATH works as for C programs);
  4. ctypes.util.find_library("cosyvoice") (the ldconfig cache, LD_LIBRARY_PATH);
  5. the plain soname "libcosyvoice.so.0" handed to the dynamic loader (its usual search path).
It is loaded on first use (`lib()`), so `import cosyvoice` works without it and the first call
says why it could not be found.

A library built with CUDA needs the CUDA runtime and cuBLAS (libcudart, libcublasLt, libcublas of
the toolkit's major version). Before loading such a library (the package's build-info.json says
whether it is one; a library from elsewhere is treated as one when those are found) each of them
is loaded by absolute path from the first place that has it:
  1. NVIDIA's pip wheels in any sys.path entry: nvidia/cu<major>/lib (CUDA 13's nvidia-cublas,
     nvidia-cuda-runtime), nvidia/cublas/lib, nvidia/cuda_runtime/lib (CUDA 12's *-cu12 wheels);
     `pip install cosyvoice[cuda13]` installs them;
  2. the system: the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache), then
     $CUDA_HOME/lib64, /usr/local/cuda/lib64 and their targets/x86_64-linux/lib.
The dynamic loader then binds libcosyvoice's needs to these copies (same soname). What was loaded
from where: debug_info().

Structs follow the header's ABI rules (include/cosyvoice.h, "ABI RULES"): each is filled by the
library's own *_init with struct_size = ctypes.sizeof of the mirror here, so a library older than
these mirrors sees only the fields it knows (the tail is zero, which means "default").
tests/test_capi.py compiles examples/c/abi_layout.c and compares every offset and size.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_double, c_float, c_int32,
                    c_int64, c_uint32, c_uint64, c_void_p)
from typing import Any, Dict, Iterable, List, Optional, Tuple

# ---- status codes (pinned by the header) ------------------------------------------------------
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
MODE_ZERO_SHOT = 0
MODE_CROSS_LINGUAL = 1
MODE_INSTRUCT = 2
SYNTH_NO_TEXT_NORMALIZATION = 0x1
SYNTH_FULL_ATTENTION_FINAL = 0x2
SYNTH_ONE_SHOT = 0x4
SYNTH_TEXT_STREAM = 0x8  # text pushed with cosy_request_push_text / cosy_request_end_text
CHUNK_LAST = 0x1
LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG = 0, 1, 2, 3
VOCODER_ACCURATE, VOCODER_TF32, VOCODER_FP16 = 1, 2, 3
ENGINE_BATCH_INVARIANT = 0x1  # cosy_engine_config.flags: require tokens independent of the batch
SPEAKER_DIM = 192
MEL_BINS = 80
SPEECH_VOCAB = 6561

LOG_FN = CFUNCTYPE(None, c_void_p, c_int32, c_char_p)


class EngineConfig(Structure):
    """cosy_engine_config."""
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("model_path", c_char_p),
                ("device", c_int32), ("gpu_memory_fraction", c_float), ("max_active", c_int32),
                ("max_queued", c_int32), ("cpu_threads", c_int32), ("log_level", c_int32),
                ("log_fn", LOG_FN), ("log_user", c_void_p),
                ("first_chunk_wait_max", c_int32), ("vocoder_precision", c_int32)]


class EngineStatsC(Structure):
    """cosy_engine_stats."""
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32), ("weights_bytes", c_int64),
                ("kv_bytes", c_int64), ("workspace_bytes", c_int64),
                ("device_bytes_total", c_int64), ("kv_pages_total", c_int32),
                ("kv_pages_used", c_int32), ("active", c_int32), ("queued", c_int32),
                ("requests_done", c_int64), ("audio_samples_out", c_int64),
                ("llm_steps", c_int64), ("llm_step_rows", c_int64), ("flow_calls", c_int64),
                ("flow_jobs", c_int64), ("vocoder_calls", c_int64), ("vocoder_jobs", c_int64),
                ("flow_pages_total", c_int32), ("flow_pages_used", c_int32)]


class EngineInfoC(Structure):
    """cosy_engine_info. Not in STRUCTS (the layout list every language's mirror checks): its
    layout is checked through the values cosy_engine_get_info writes (python/tests)."""
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32), ("device", c_int32),
                ("max_active", c_int32), ("max_queued", c_int32), ("cpu_threads", c_int32),
                ("sample_rate", c_int32), ("first_chunk_wait_max", c_int32),
                ("kv_page_positions", c_int32), ("kv_pages_total", c_int32),
                ("flow_pages_total", c_int32), ("cc_major", c_int32), ("cc_minor", c_int32),
                ("n_sm", c_int32), ("smem_per_block", c_int32), ("clusters", c_int32),
                ("pdl", c_int32), ("gpu_memory_fraction", c_float),
                ("gpu_memory_budget", c_int64), ("gpu_memory_planned", c_int64),
                ("backend", c_char * 8), ("device_name", c_char * 96),
                ("gpu_profile", c_char * 24)]


class VoiceFeatures(Structure):
    """cosy_voice_features."""
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32), ("prompt_text", c_char_p),
                ("speech_tokens", POINTER(c_int32)), ("n_speech_tokens", c_int32),
                ("n_mel_frames", c_int32), ("mel", POINTER(c_float)),
                ("speaker_embedding", POINTER(c_float)), ("speaker_dim", c_int32),
                ("reserved2", c_int32)]


class SynthParams(Structure):
    """cosy_synth_params (make_params fills one)."""
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("mode", c_int32),
                ("sample_rate", c_int32), ("instruct_text", c_char_p), ("speed", c_float),
                ("temperature", c_float), ("top_p", c_float), ("top_k", c_int32),
                ("seed", c_uint64), ("first_chunk_tokens", c_int32), ("max_tokens", c_int32),
                ("min_tokens", c_int32), ("reserved", c_int32)]


class Chunk(Structure):
    """cosy_chunk."""
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("pcm", POINTER(c_float)),
                ("n_samples", c_int64), ("offset", c_int64), ("sample_rate", c_int32),
                ("reserved", c_int32)]


class RequestStatsC(Structure):
    """cosy_request_stats."""
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32), ("ttfb_s", c_double),
                ("total_s", c_double), ("llm_s", c_double), ("flow_s", c_double),
                ("vocoder_s", c_double), ("n_samples", c_int64), ("n_text_tokens", c_int32),
                ("n_speech_tokens", c_int32), ("n_chunks", c_int32), ("done", c_int32)]


class TextMarkC(Structure):
    """cosy_text_mark."""
    _fields_ = [("struct_size", c_uint32), ("reserved", c_uint32), ("text_begin", c_int64),
                ("text_end", c_int64), ("sample", c_int64), ("text_token", c_int32),
                ("speech_token", c_int32)]


# the C type names, for the layout check (tests/test_capi.py)
STRUCTS = {"cosy_engine_config": EngineConfig, "cosy_engine_stats": EngineStatsC,
           "cosy_voice_features": VoiceFeatures, "cosy_synth_params": SynthParams,
           "cosy_chunk": Chunk, "cosy_request_stats": RequestStatsC,
           "cosy_text_mark": TextMarkC}

CHUNK_FN = CFUNCTYPE(c_int32, c_void_p, POINTER(Chunk))

_h = c_void_p   # opaque handles
_st = c_int32
# name: (restype, argtypes) for every exported function (abi/cosyvoice.symbols lists them)
PROTOS: Dict[str, Tuple[Any, List[Any]]] = {
    "cosy_version_number": (c_uint32, []),
    "cosy_version_string": (c_char_p, []),
    "cosy_status_str": (c_char_p, [_st]),
    "cosy_last_error": (c_char_p, []),
    "cosy_engine_config_init": (None, [POINTER(EngineConfig), c_uint32]),
    "cosy_engine_create": (_st, [POINTER(EngineConfig), POINTER(_h)]),
    "cosy_engine_destroy": (None, [_h]),
    "cosy_engine_sample_rate": (c_int32, [_h]),
    "cosy_engine_stats_init": (None, [POINTER(EngineStatsC), c_uint32]),
    "cosy_engine_get_stats": (_st, [_h, POINTER(EngineStatsC)]),
    "cosy_engine_info_init": (None, [POINTER(EngineInfoC), c_uint32]),
    "cosy_engine_get_info": (_st, [_h, POINTER(EngineInfoC)]),
    "cosy_voice_load": (_st, [_h, c_char_p, POINTER(_h)]),
    "cosy_voice_save": (_st, [_h, c_char_p]),
    "cosy_voice_features_init": (None, [POINTER(VoiceFeatures), c_uint32]),
    "cosy_voice_from_features": (_st, [_h, POINTER(VoiceFeatures), POINTER(_h)]),
    "cosy_voice_from_audio": (_st, [_h, POINTER(c_float), c_int64, c_int32, c_char_p,
                                    POINTER(_h)]),
    "cosy_audio_to_mel": (_st, [POINTER(c_float), c_int64, c_int32, POINTER(POINTER(c_float)),
                                POINTER(c_int32)]),
    "cosy_voice_release": (None, [_h]),
    "cosy_synth_params_init": (None, [POINTER(SynthParams), c_uint32]),
    "cosy_synthesize": (_st, [_h, _h, c_char_p, POINTER(SynthParams), POINTER(POINTER(c_float)),
                              POINTER(c_int64)]),
    "cosy_request_submit": (_st, [_h, _h, c_char_p, POINTER(SynthParams), CHUNK_FN, c_void_p,
                                  POINTER(_h)]),
    "cosy_request_push_text": (_st, [_h, c_char_p]),
    "cosy_request_end_text": (_st, [_h]),
    "cosy_request_read": (_st, [_h, POINTER(c_float), c_int64, POINTER(c_int64), c_int32]),
    "cosy_request_stats_init": (None, [POINTER(RequestStatsC), c_uint32]),
    "cosy_request_get_stats": (_st, [_h, POINTER(RequestStatsC)]),
    "cosy_text_mark_init": (None, [POINTER(TextMarkC), c_uint32]),
    "cosy_request_text_marks": (_st, [_h, c_int32, POINTER(TextMarkC), c_int32,
                                      POINTER(c_int32)]),
    "cosy_request_cancel": (None, [_h]),
    "cosy_request_wait": (_st, [_h, c_int32]),
    "cosy_request_release": (None, [_h]),
    "cosy_free": (None, [c_void_p]),
}


def _pkg_config_libdir() -> Optional[str]:
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--variable=libdir", "cosyvoice"], capture_output=True,
                             text=True, check=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


PACKAGE_LIB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
SONAME = "libcosyvoice.so.0"


def build_info() -> Optional[Dict[str, Any]]:
    """How the library inside this package was built (cosyvoice/lib/build-info.json: version,
    cuda 0/1, cuda_major, cuda_release, targets), or None when the package carries none."""
    try:
        with open(os.path.join(PACKAGE_LIB_DIR, "build-info.json")) as f:
            info = json.load(f)
    except OSError:
        return None
    return info if isinstance(info, dict) else None


def find_library() -> str:
    """Where libcosyvoice will be loaded from (a path, or a name for the dynamic loader); the
    search order is in this module's docstring. Raises LibraryNotFound (an OSError)."""
    env = os.environ.get("COSYVOICE_LIB")
    if env:
        if os.sep in env and not os.path.exists(env):
            raise LibraryNotFound(f"COSYVOICE_LIB={env}: no such file")
        return env
    bundled = os.path.join(PACKAGE_LIB_DIR, SONAME)
    if os.path.exists(bundled):
        return bundled
    libdir = _pkg_config_libdir()
    if libdir:
        for cand in ("libcosyvoice.so.0", "libcosyvoice.so", "libcosyvoice.dylib"):
            path = os.path.join(libdir, cand)
            if os.path.exists(path):
                return path
    name = ctypes.util.find_library("cosyvoice")
    if name:
        return name
    return "libcosyvoice.so.0"


class LibraryNotFound(OSError):
    """libcosyvoice could not be found or loaded."""


_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None
_loaded_from: Optional[str] = None
_cuda_loaded: Dict[str, str] = {}   # soname -> where it was loaded from (debug_info)


def _cuda_search_dirs(major: str) -> Tuple[List[str], List[str]]:
    """Directories of NVIDIA's pip wheels (first) and of the system's toolkit (last)."""
    wheel_dirs, seen = [], set()
    for entry in sys.path:
        base = os.path.join(entry or ".", "nvidia")
        for sub in (f"cu{major}", "cublas", "cuda_runtime"):
            d = os.path.abspath(os.path.join(base, sub, "lib"))
            if d not in seen and os.path.isdir(d):
                seen.add(d)
                wheel_dirs.append(d)
    system_dirs = []
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            for sub in ("lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
                d = os.path.join(home, sub)
                if d not in seen and os.path.isdir(d):
                    seen.add(d)
                    system_dirs.append(d)
    return wheel_dirs, system_dirs


def _load_global_from(dirs: List[str], soname: str) -> Optional[str]:
    """Loads `soname` (RTLD_GLOBAL) from the first of `dirs` where it exists and loads; its path,
    or None."""
    for d in dirs:
        path = os.path.join(d, soname)
        if os.path.exists(path):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                return path
            except OSError:
                pass
    return None


def preload_cuda(major: str, sonames: Optional[Iterable[str]] = None) -> Dict[str, str]:
    """Loads libcudart, libcublasLt and libcublas of CUDA `major` (or only those of `sonames`)
    from NVIDIA's pip wheels, else from the system (the order of this module's docstring);
    returns {soname: where} for those found. Missing ones are left to the dynamic loader
    (loading libcosyvoice then says which)."""
    wheel_dirs, system_dirs = _cuda_search_dirs(major)
    for name in ("cudart", "cublasLt", "cublas"):   # cublas needs cublasLt
        soname = f"lib{name}.so.{major}"
        if sonames is not None and soname not in sonames:
            continue
        if soname in _cuda_loaded:
            continue
        where = _load_global_from(wheel_dirs, soname)
        if where is None:
            try:
                ctypes.CDLL(soname, mode=ctypes.RTLD_GLOBAL)
                where = f"{soname} (dynamic loader's search)"
            except OSError:
                where = _load_global_from(system_dirs, soname)
        if where is not None:
            _cuda_loaded[soname] = where
    return dict(_cuda_loaded)


def _load(where: str) -> ctypes.CDLL:
    """ctypes.CDLL(where) with the CUDA libraries loaded first where it needs them: the package's
    own library says so in build-info.json; another (COSYVOICE_LIB, pkg-config: linked with the
    build machine's CUDA directory as RPATH) is loaded as it is, and once more after
    preload_cuda when the dynamic loader names a CUDA library it could not find."""
    if os.path.abspath(where) == os.path.join(PACKAGE_LIB_DIR, SONAME):
        info = build_info() or {}
        if info.get("cuda") and info.get("cuda_major"):
            preload_cuda(str(info["cuda_major"]), info.get("cuda_libs"))
        return ctypes.CDLL(where)
    try:
        return ctypes.CDLL(where)
    except OSError as e:
        m = re.search(r"lib(?:cudart|cublasLt|cublas)\.so\.(\d+)", str(e))
        if not m:
            raise
        preload_cuda(m.group(1))
        return ctypes.CDLL(where)


def debug_info() -> Dict[str, Any]:
    """Where the library and the CUDA libraries were loaded from, and how the package's library
    was built: {"library", "build_info", "cuda_libraries", "version"} (loads the library)."""
    handle = lib()
    return {"library": _loaded_from, "build_info": build_info(),
            "cuda_libraries": dict(_cuda_loaded),
            "version": handle.cosy_version_string().decode()}


def lib() -> Any:
    """The loaded library with every prototype declared (loaded once, on first use)."""
    global _lib, _loaded_from
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            where = find_library()
            try:
                handle = _load(where)
            except OSError as e:
                hint = ""
                if re.search(r"libcu(?:dart|blas)", str(e)):
                    hint = (" The CUDA runtime or cuBLAS is missing: install NVIDIA's wheels "
                            "(pip install 'cosyvoice[cuda13]', or [cuda12] for a CUDA 12 build) "
                            "or the CUDA toolkit's libraries (LD_LIBRARY_PATH, CUDA_HOME).")
                raise LibraryNotFound(
                    f"cannot load libcosyvoice ({where}): {e}.{hint} Set COSYVOICE_LIB to the "
                    "path of libcosyvoice.so.0, install it where the dynamic loader looks, or "
                    "make `pkg-config cosyvoice` find it (PKG_CONFIG_PATH)") from e
            for name, (res, args) in PROTOS.items():
                try:
                    fn = getattr(handle, name)
                except AttributeError as e:
                    raise LibraryNotFound(f"{where} does not export {name}: not a libcosyvoice "
                                          "this package can use") from e
                fn.restype = res
                fn.argtypes = args
            _loaded_from = where
            _lib = handle
    return _lib


def last_error() -> str:
    """cosy_last_error() of this OS thread."""
    return str(lib().cosy_last_error().decode("utf-8", "replace"))


def status_str(status: int) -> str:
    """cosy_status_str(): the status code's short name, e.g. 'invalid argument'."""
    return str(lib().cosy_status_str(status).decode())
