"""cosyvoice - CosyVoice3 text-to-speech through libcosyvoice (ctypes; numpy float32 audio).

    import cosyvoice
    with cosyvoice.Engine("model.gguf") as eng, eng.load_voice("voice.gguf") as voice:
        pcm = eng.synthesize(voice, "Hello.", seed=42)          # numpy float32, 24 kHz
        for chunk in eng.stream(voice, "Hello again.", seed=42):  # pull streaming
            play(chunk)

The library is found through $COSYVOICE_LIB, the copy inside this package, pkg-config or the
dynamic loader (see _capi); debug_info() says what was loaded from where.
Errors raise subclasses of CosyError carrying .status and .message (cosy_last_error()); a model
or voice file that does not exist raises FileNotFound, a FileNotFoundError. Modes are numbers
(MODE_*) or names in either spelling ('cross-lingual' or 'cross_lingual'): parse_mode().
The public API is annotated (py.typed) and checked with mypy (python/pyproject.toml [tool.mypy]).
cosyvoice.convert is the model converter (the cosyvoice-convert command).
"""
from ._capi import (CHUNK_LAST, DEVICE_CPU, ERR_CANCELLED, ERR_CUDA, ERR_DEVICE_LOST,
                    ERR_GPU_NO_MEMORY, ERR_INTERNAL, ERR_INVALID_ARG, ERR_IO, ERR_MODEL_FORMAT,
                    ERR_MODEL_VERSION, ERR_NO_MEMORY, ERR_QUEUE_FULL, ERR_STRUCT_SIZE, ERR_TEXT,
                    ERR_TIMEOUT, ERR_UNSUPPORTED, LOG_DEBUG, LOG_ERROR, LOG_INFO, LOG_WARN,
                    MODE_CROSS_LINGUAL, MODE_INSTRUCT, MODE_ZERO_SHOT, OK,
                    SYNTH_FULL_ATTENTION_FINAL, SYNTH_NO_TEXT_NORMALIZATION, VOCODER_ACCURATE,
                    VOCODER_TF32, VOCODER_FP16, ENGINE_BATCH_INVARIANT, LibraryNotFound,
                    build_info, debug_info, find_library, last_error, status_str)
from .audio import read_wav, to_pcm16, wav_header, write_wav
from .engine import (MODES, Engine, EngineStats, Request, RequestStats, TextMark, Voice,
                     audio_to_mel, make_params, mode_name, parse_mode, version)
from .errors import (BY_STATUS, Cancelled, CosyError, CudaError, DeviceLost, FileNotFound,
                     GpuOutOfMemory, InternalError, InvalidArgument, IOError_, ModelFormatError,
                     ModelVersionError, OutOfMemory, QueueFull, StructSizeError, TextError,
                     Timeout, Unsupported, error_for)

__version__ = "0.1.0"

__all__ = ["BY_STATUS", "CHUNK_LAST", "Cancelled", "CosyError", "CudaError", "DEVICE_CPU",
           "DeviceLost", "ENGINE_BATCH_INVARIANT", "ERR_CANCELLED", "ERR_CUDA", "ERR_DEVICE_LOST",
           "ERR_GPU_NO_MEMORY", "ERR_INTERNAL", "ERR_INVALID_ARG", "ERR_IO", "ERR_MODEL_FORMAT",
           "ERR_MODEL_VERSION", "ERR_NO_MEMORY", "ERR_QUEUE_FULL", "ERR_STRUCT_SIZE", "ERR_TEXT",
           "ERR_TIMEOUT", "ERR_UNSUPPORTED", "Engine", "EngineStats", "FileNotFound",
           "GpuOutOfMemory", "IOError_", "InternalError", "InvalidArgument", "LOG_DEBUG",
           "LOG_ERROR", "LOG_INFO", "LOG_WARN", "LibraryNotFound", "MODES", "MODE_CROSS_LINGUAL",
           "MODE_INSTRUCT", "MODE_ZERO_SHOT", "ModelFormatError", "ModelVersionError", "OK",
           "OutOfMemory", "QueueFull", "Request", "RequestStats", "SYNTH_FULL_ATTENTION_FINAL",
           "SYNTH_NO_TEXT_NORMALIZATION", "StructSizeError", "TextError", "TextMark", "Timeout",
           "Unsupported", "VOCODER_ACCURATE", "VOCODER_FP16", "VOCODER_TF32", "Voice",
           "audio_to_mel", "error_for",
           "find_library", "last_error", "make_params", "mode_name", "parse_mode", "read_wav",
           "status_str", "to_pcm16", "version", "wav_header", "write_wav"]
