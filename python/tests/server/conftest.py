"""A real server process (`python -m cosyvoice.server`, uvicorn) on a free loopback port, with the
small test model and voices made through the package in a temporary directory."""
import os
import sys

import httpx
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import cosy_test_support as support  # noqa: E402
from server_support import start_server, stop_server  # noqa: E402

VOICES = ("alloy", "nova")


@pytest.fixture(scope="session")
def model_path():
    p = support.test_model()
    if not p:
        pytest.skip("no test model (`make build/test/small-f32.gguf`, needs ../shared)")
    return p


@pytest.fixture(scope="session")
def fe_model():
    """The small model with (random) front-end models, for cloning voices from audio."""
    p = support.fe_test_model()
    if not p:
        pytest.skip("no front-end test model (`make build/test/small-fe-f32.gguf`)")
    return p


@pytest.fixture(scope="session")
def voices_dir(model_path, tmp_path_factory):
    d = tmp_path_factory.mktemp("srv") / "voices"
    support.write_voices(model_path, str(d), VOICES)
    (d / "broken.gguf").write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 40)
    return str(d)


@pytest.fixture(scope="session")
def server(model_path, voices_dir):
    """(base URL, process): max_active 2 and max_queued 1, so a third and fourth long request
    find the queue full."""
    proc, url, log = start_server(model_path, os.path.dirname(voices_dir), "--voices", voices_dir,
                                  "--max-active", "2", "--max-queued", "1", "--read-timeout", "2",
                                  "--ws-idle-timeout", "3")
    yield url, proc
    stop_server(proc, log)


@pytest.fixture(scope="session")
def client(server):
    with httpx.Client(base_url=server[0], timeout=120) as c:
        yield c


@pytest.fixture(scope="session")
def reference(model_path, voices_dir):
    """reference(voice, text, **params) -> the float32 audio the package makes in-process."""
    import cosyvoice
    eng = cosyvoice.Engine(model_path)
    voices = {}

    def synth(voice, text, **kw):
        if voice not in voices:
            voices[voice] = eng.load_voice(os.path.join(voices_dir, voice + ".gguf"))
        return eng.synthesize(voices[voice], text, **kw)

    yield synth
    for v in voices.values():
        v.close()
    eng.close()
