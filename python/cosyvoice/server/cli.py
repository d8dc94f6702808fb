"""cosyvoice-server: the OpenAI-compatible speech server's command line (uvicorn)."""
import argparse
import os
import sys

from .limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_UPLOAD_BYTES, DEFAULT_READ_TIMEOUT

USAGE_EXAMPLE = """\
examples:
  cosyvoice-server --model cosyvoice3.gguf --voice-wav me.wav --voice-text "What me.wav says."
  cosyvoice-server --model cosyvoice3.gguf --voices voices/ --device 0 --port 8000

then, e.g. with the openai package:
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
  client.audio.speech.create(model="tts-1", voice="alloy", input="Hello.").write_to_file("a.mp3")
"""


def _protocol_class(name, read_timeout):
    """uvicorn's HTTP protocol class `name` (auto: httptools when installed) with the read
    timeout of limits.timed_protocol."""
    from .limits import timed_protocol
    if name == "auto":
        try:
            import httptools  # noqa: F401
            name = "httptools"
        except ImportError:
            name = "h11"
    if name == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    else:
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
    return timed_protocol(base, read_timeout)


def build_parser():
    """The argparse parser of cosyvoice-server."""
    from .app import DEFAULT_ALIASES
    from .encoders import ALL_FORMATS
    from .refvoice import DEFAULT_CACHE_BYTES, DEFAULT_CACHE_COUNT, DEFAULT_CACHE_TTL
    env = os.environ.get
    ap = argparse.ArgumentParser(
        prog="cosyvoice-server", epilog=USAGE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="An OpenAI-compatible speech endpoint (POST /v1/audio/speech) on libcosyvoice.")
    g = ap.add_argument_group("model and voices")
    g.add_argument("--model", default=env("COSYVOICE_MODEL"),
                   help="the model file, .gguf (COSYVOICE_MODEL)")
    g.add_argument("--voice-wav", metavar="WAV",
                   help="clone the server's voice from this recording (0.5-30 s; needs a model "
                        "converted with its front-end models)")
    g.add_argument("--voice-text", metavar="TEXT", help="what --voice-wav says (its transcript)")
    g.add_argument("--voice-name", default="default",
                   help="the name of the --voice-wav voice (default: %(default)s)")
    g.add_argument("--voices", metavar="DIR", default=env("COSYVOICE_VOICES"),
                   help="a folder of saved voices, NAME.gguf (`cosyvoice-say --save-voice`) "
                        "(COSYVOICE_VOICES)")
    g.add_argument("--default-voice", metavar="NAME",
                   help="the voice that answers OpenAI's voice names (alloy, nova, ...) that "
                        "are not voices here (default: the --voice-wav voice)")
    g = ap.add_argument_group("engine")
    g.add_argument("--device", type=int, default=int(env("COSYVOICE_DEVICE", "-1")),
                   help="CUDA ordinal, or -1 for the CPU (COSYVOICE_DEVICE; default %(default)s)")
    g.add_argument("--max-active", type=int, default=0, help="engine max_active (0 = default)")
    g.add_argument("--max-queued", type=int, default=0, help="engine max_queued (0 = default)")
    g.add_argument("--cpu-threads", type=int, default=0)
    g.add_argument("--gpu-memory-fraction", type=float, default=0.0)
    g = ap.add_argument_group("API")
    g.add_argument("--served-model-name", default="cosyvoice3")
    g.add_argument("--model-alias", action="append", default=None,
                   help="another accepted model name (repeatable; default: "
                        f"{', '.join(DEFAULT_ALIASES)}; give '' for none)")
    g.add_argument("--default-response-format", default="mp3", choices=ALL_FORMATS,
                   help="when a request names none (OpenAI's default: mp3)")
    g = ap.add_argument_group("limits")
    g.add_argument("--max-input-chars", type=int, default=4096,
                   help="longest input (default: %(default)s, OpenAI's)")
    g.add_argument("--max-instructions-chars", type=int, default=1000,
                   help="longest instructions (default: %(default)s)")
    g.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help="largest request body (default: %(default)s)")
    g.add_argument("--max-upload-bytes", type=int, default=DEFAULT_MAX_UPLOAD_BYTES,
                   help="largest body of POST /v1/voices (a recording), and of a speech request "
                        "or WebSocket session message with a reference recording "
                        "(default: %(default)s)")
    g.add_argument("--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT,
                   help="seconds a client may take to send a request's head, and again its "
                        "body (default: %(default)s)")
    g.add_argument("--ws-idle-timeout", type=float, default=30.0,
                   help="seconds a WebSocket utterance may wait for its next message before it "
                        "is ended (default: %(default)s)")
    g.add_argument("--reference-cache-size", type=int, default=DEFAULT_CACHE_COUNT,
                   metavar="N", help="voices of recent reference recordings kept for requests "
                   "that send the same one again; 0: none (default: %(default)s)")
    g.add_argument("--reference-cache-bytes", type=int, default=DEFAULT_CACHE_BYTES, metavar="N",
                   help="most bytes of voice features in that cache (default: %(default)s)")
    g.add_argument("--reference-cache-ttl", type=float, default=DEFAULT_CACHE_TTL,
                   metavar="SECONDS", help="a cached reference voice unused this long is dropped "
                   "(default: %(default)s)")
    g = ap.add_argument_group("HTTP")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    g.add_argument("--port", type=int, default=8000, help="(default: %(default)s)")
    g.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"))
    g.add_argument("--http", default="auto", choices=("auto", "h11", "httptools"),
                   help="uvicorn's HTTP parser (auto: httptools when installed)")
    g.add_argument("--loop", default="auto", choices=("auto", "asyncio", "uvloop"),
                   help="uvicorn's event loop (auto: uvloop when installed)")
    return ap


def parse_args(argv=None, need_files=True):
    """The Settings and uvicorn options of a command line; every check that needs no model runs
    here, before the model loads (argparse exits with status 2 and a message)."""
    from .app import DEFAULT_ALIASES, Settings
    ap = build_parser()
    a = ap.parse_args(argv)
    if not a.model:
        ap.error("--model is required (or COSYVOICE_MODEL)")
    if need_files and not os.path.isfile(a.model):
        ap.error(f"--model {a.model}: no such file")
    if a.voice_wav and a.voice_text is None:
        ap.error("--voice-wav needs --voice-text (what the recording says)")
    if a.voice_text is not None and not a.voice_wav:
        ap.error("--voice-text needs --voice-wav")
    if a.voice_wav and not os.path.isfile(a.voice_wav):
        ap.error(f"--voice-wav {a.voice_wav}: no such file")
    if a.voices and not os.path.isdir(a.voices):
        ap.error(f"--voices {a.voices}: not a folder")
    if not a.voice_wav and not a.voices:
        ap.error("no voice: give --voice-wav WAV --voice-text TEXT (clone one), or --voices DIR "
                 "(saved voices; or COSYVOICE_VOICES)")
    for name, v, lo in (("--max-input-chars", a.max_input_chars, 1),
                        ("--max-instructions-chars", a.max_instructions_chars, 0),
                        ("--max-body-bytes", a.max_body_bytes, 1024),
                        ("--max-upload-bytes", a.max_upload_bytes, 1024),
                        ("--reference-cache-size", a.reference_cache_size, 0),
                        ("--reference-cache-bytes", a.reference_cache_bytes, 0)):
        if v < lo:
            ap.error(f"{name} {v}: at least {lo}")
    for name, v in (("--read-timeout", a.read_timeout), ("--ws-idle-timeout", a.ws_idle_timeout),
                    ("--reference-cache-ttl", a.reference_cache_ttl)):
        if not v > 0:
            ap.error(f"{name} {v}: must be positive")
    if not 0 < a.port < 65536:
        ap.error(f"--port {a.port}: 1..65535")
    settings = Settings(a.model, a.voices, a.device, a.max_active, a.max_queued, a.cpu_threads,
                        a.gpu_memory_fraction, a.served_model_name,
                        DEFAULT_ALIASES if a.model_alias is None else tuple(a.model_alias),
                        a.max_input_chars, a.default_response_format,
                        voice_wav=a.voice_wav, voice_text=a.voice_text or "",
                        voice_name=a.voice_name, default_voice=a.default_voice,
                        max_instructions_chars=a.max_instructions_chars,
                        max_body_bytes=a.max_body_bytes, read_timeout=a.read_timeout,
                        max_upload_bytes=a.max_upload_bytes, ws_idle_timeout=a.ws_idle_timeout,
                        reference_cache_count=a.reference_cache_size,
                        reference_cache_bytes=a.reference_cache_bytes,
                        reference_cache_ttl=a.reference_cache_ttl)
    return settings, a


def main(argv=None, engine_factory=None):
    """The command line; engine_factory as create_app's (bench/serve_overhead.py serves a
    stand-in engine through exactly this uvicorn setup)."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as e:
        sys.exit(f"cosyvoice-server: {e.name} is not installed; the server needs the package's "
                 "server extra: pip install 'cosyvoice[server]'")
    import logging
    from .app import VOICE_NAME, create_app
    settings, a = parse_args(argv, need_files=engine_factory is None)
    if a.voice_wav and not VOICE_NAME.match(a.voice_name):
        sys.exit(f"cosyvoice-server: --voice-name {a.voice_name!r}: letters, digits, '.', '_' "
                 "and '-'")
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    uvicorn.run(create_app(settings, engine_factory), host=a.host, port=a.port,
                log_level=a.log_level, http=_protocol_class(a.http, a.read_timeout),
                loop=a.loop, timeout_graceful_shutdown=5,
                # a session message may carry a reference recording (ws.py checks the rest)
                ws_max_size=max(a.max_body_bytes, a.max_upload_bytes))
