"""cosyvoice.server - an OpenAI-compatible speech server on libcosyvoice (FastAPI + uvicorn).

    pip install 'cosyvoice[server]'
    cosyvoice-server --model cosyvoice3.gguf --voice-wav me.wav --voice-text "What me.wav says."

app.py has the endpoints, formats, limits and errors; cli.py the command line
(`cosyvoice-server --help`); docs/serving.md how to deploy it. The modules need the `server`
extra (fastapi, uvicorn, soundfile); importing this package does not.
"""


def main(argv=None, engine_factory=None):
    """The `cosyvoice-server` command (cli.main)."""
    from .cli import main as _main
    return _main(argv, engine_factory)


def create_app(settings, engine_factory=None):
    """The server's ASGI app for settings (app.create_app), e.g. to run under another ASGI
    server."""
    from .app import create_app as _create_app
    return _create_app(settings, engine_factory)


__all__ = ["main", "create_app"]
