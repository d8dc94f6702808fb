"""The server as a new user meets it: `cosyvoice-server --model M --voice-wav W --voice-text T`
(a voice cloned at startup, the model with its front-end models) and the official `openai`
client: speech with the default format (mp3) and streamed, OpenAI's voice names answered by the
cloned voice, models.list / models.retrieve; and the server's papercuts: a whole WAV response
carries its exact sizes, speeds 0.25 .. 4 (beyond the engine's 0.5 .. 2 by WSOLA, stretch.py);
voices made from an upload, kept in the voices folder, listed, fetched and deleted."""
import base64
import io
import os
import struct

import httpx
import numpy as np
import pytest

import cosyvoice
from server_support import start_server, stop_server

openai = pytest.importorskip("openai")
sf = pytest.importorskip("soundfile")

TEXT = "Hello there, this is the speech server speaking."
PROMPT = "Some words of the prompt."


@pytest.fixture(scope="module")
def voice_wav(tmp_path_factory):
    """A 2 s modulated tone as the recording to clone."""
    rate = 24000
    t = np.arange(2 * rate) / rate
    x = 0.3 * np.sin(2 * np.pi * 150 * t) * (1 + 0.3 * np.sin(2 * np.pi * 2 * t))
    path = str(tmp_path_factory.mktemp("clone") / "me.wav")
    cosyvoice.write_wav(path, x.astype(np.float32), rate)
    return path


@pytest.fixture(scope="module")
def clone_server(fe_model, voice_wav):
    """Base URL of `python -m cosyvoice.server --model FE --voice-wav W --voice-text T --voices
    DIR` (DIR empty at first)."""
    voices = os.path.join(os.path.dirname(voice_wav), "voices")
    os.makedirs(voices)
    proc, url, log = start_server(fe_model, os.path.dirname(voice_wav), "--voice-wav", voice_wav,
                                  "--voice-text", PROMPT, "--voices", voices)
    yield url
    stop_server(proc, log)


@pytest.fixture(scope="module")
def ref(fe_model, voice_wav):
    """ref(text, **params): the in-process audio of the same cloned voice."""
    eng = cosyvoice.Engine(fe_model)
    v = eng.voice_from_wav(voice_wav, PROMPT)
    yield lambda text, **kw: eng.synthesize(v, text, **kw)
    v.close()
    eng.close()


@pytest.fixture(scope="module")
def oa(clone_server):
    with openai.OpenAI(base_url=clone_server + "/v1", api_key="unused", max_retries=0,
                       timeout=120) as c:
        yield c


def test_default_format_mp3_through_the_official_client(oa, ref):
    r = oa.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, extra_body={"seed": 7})
    data = r.read()
    assert data[:3] == b"ID3" or data[0] == 0xFF, data[:8]
    got, rate = sf.read(io.BytesIO(data), dtype="float32")
    want = ref(TEXT, seed=7)
    assert rate == 24000 and abs(got.size - want.size) < 2400, (got.size, want.size)
    assert np.sqrt(np.mean(got ** 2)) > 0.2 * np.sqrt(np.mean(want ** 2))


@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_streaming_through_the_official_client(oa, ref, fmt):
    pieces = []
    with oa.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="nova", input=TEXT, response_format=fmt,
            extra_body={"seed": 9, "min_tokens": 120, "max_tokens": 120}) as r:
        assert r.headers["content-type"] == {"pcm": "audio/pcm", "mp3": "audio/mpeg"}[fmt]
        for b in r.iter_bytes():
            pieces.append(b)
    data = b"".join(pieces)
    want = ref(TEXT, seed=9, min_tokens=120, max_tokens=120)
    if fmt == "pcm":
        assert data == cosyvoice.to_pcm16(want)   # OpenAI's names get the cloned voice
    else:
        got, rate = sf.read(io.BytesIO(data), dtype="float32")
        assert rate == 24000 and abs(got.size - want.size) < 2400


def test_the_cloned_voice_by_its_name_and_unknown_names(oa, clone_server, ref):
    r = oa.audio.speech.create(model="tts-1", voice="default", input=TEXT, response_format="pcm",
                               extra_body={"seed": 3})
    assert r.read() == cosyvoice.to_pcm16(ref(TEXT, seed=3))
    with pytest.raises(openai.BadRequestError) as e:
        oa.audio.speech.create(model="tts-1", voice="bob", input=TEXT)
    assert e.value.body["code"] == "voice_not_found" and "default" in e.value.body["message"]
    assert [v["id"] for v in httpx.get(clone_server + "/v1/voices").json()["data"]] == ["default"]


def test_models_list_and_retrieve(oa):
    ids = [m.id for m in oa.models.list()]
    assert ids == ["cosyvoice3", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
    for name in ids:
        m = oa.models.retrieve(name)
        assert m.id == name and m.object == "model" and m.owned_by == "libcosyvoice"
    with pytest.raises(openai.NotFoundError) as e:
        oa.models.retrieve("whisper-1")
    assert e.value.body["code"] == "model_not_found"


def wav_sizes(data):
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt " and data[36:40] == b"data"
    return struct.unpack("<I", data[4:8])[0], struct.unpack("<I", data[40:44])[0]


def test_whole_wav_has_its_exact_sizes(clone_server, ref):
    with httpx.Client(base_url=clone_server, timeout=120) as c:
        body = {"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "wav",
                "seed": 4}
        whole = c.post("/v1/audio/speech", json=dict(body, stream=False))
        assert whole.status_code == 200, whole.text
        data = whole.content
        assert int(whole.headers["content-length"]) == len(data)
        assert wav_sizes(data) == (len(data) - 8, len(data) - 44)
        assert data[44:] == cosyvoice.to_pcm16(ref(TEXT, seed=4))
        # the streamed one says "unknown length" (the convention for streams) with the same audio
        streamed = c.post("/v1/audio/speech", json=body)
        assert wav_sizes(streamed.content) == (0xFFFFFFFF, 0xFFFFFFFF)
        assert streamed.content[44:] == data[44:]
        # a speed other than 1 is made whole: exact sizes without asking
        slow = c.post("/v1/audio/speech", json=dict(body, speed=0.8)).content
        assert wav_sizes(slow) == (len(slow) - 8, len(slow) - 44)


@pytest.mark.parametrize("speed,engine_speed,rest", [(0.25, 0.5, 0.5), (0.7, 0.7, 1.0),
                                                     (3.0, 2.0, 1.5), (4.0, 2.0, 2.0)])
def test_openai_speed_range(oa, ref, speed, engine_speed, rest):
    from cosyvoice.server.stretch import split_speed, time_stretch
    assert split_speed(speed) == pytest.approx((engine_speed, rest))
    r = oa.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm",
                               speed=speed, extra_body={"seed": 6})
    base = ref(TEXT, seed=6, speed=engine_speed)
    want = base if rest == 1.0 else time_stretch(base, rest, 24000)
    assert r.read() == cosyvoice.to_pcm16(want)
    normal = ref(TEXT, seed=6)
    # the length follows the speed (the engine's mel resampling and WSOLA both keep the tokens)
    assert abs(want.size * speed / normal.size - 1) < 0.05, (want.size, normal.size)


def test_time_stretch_keeps_pitch_and_level():
    from cosyvoice.server.stretch import time_stretch
    rate = 24000
    rng = np.random.default_rng(1)
    for f0 in rng.uniform(120, 400, 3):
        t = np.arange(rate) / rate
        x = (0.4 * np.sin(2 * np.pi * f0 * t)).astype(np.float32)
        for r in (0.5, 0.8, 1.6, 2.0):
            y = time_stretch(x, r, rate)
            assert y.size == round(x.size / r)
            spec = np.abs(np.fft.rfft(y * np.hanning(y.size)))
            peak = np.argmax(spec) * rate / y.size
            assert abs(peak / f0 - 1) < 0.02, (f0, r, peak)
            mid = y[y.size // 4:3 * y.size // 4]
            assert abs(np.sqrt(np.mean(mid ** 2)) / (0.4 / np.sqrt(2)) - 1) < 0.05
    with pytest.raises(ValueError):
        time_stretch(np.zeros(100, np.float32), 5.0, rate)


def test_voices_made_listed_fetched_and_deleted(clone_server, fe_model, voice_wav):
    folder = os.path.join(os.path.dirname(voice_wav), "voices")
    with open(voice_wav, "rb") as f:
        wav = f.read()
    with httpx.Client(base_url=clone_server, timeout=120) as c:
        r = c.post("/v1/voices", json={"name": "bob", "transcript": "Bob says hello.",
                                       "audio": base64.b64encode(wav).decode()})
        assert r.status_code == 201, r.text
        assert r.json() == {"id": "bob", "object": "voice", "source": "folder"}
        assert os.path.exists(os.path.join(folder, "bob.gguf"))   # kept across restarts
        assert c.get("/v1/voices/bob").json()["id"] == "bob"
        assert [v["id"] for v in c.get("/v1/voices").json()["data"]] == ["bob", "default"]
        got = c.post("/v1/audio/speech", json={"model": "tts-1", "voice": "bob", "input": TEXT,
                                               "response_format": "pcm", "seed": 2}).content
        with cosyvoice.Engine(fe_model) as eng, eng.voice_from_wav(voice_wav,
                                                                   "Bob says hello.") as v:
            assert got == cosyvoice.to_pcm16(eng.synthesize(v, TEXT, seed=2))
        # the raw WAV as the body, name and transcript in the query
        r = c.post("/v1/voices", params={"name": "eve", "transcript": "Eve."}, content=wav,
                   headers={"content-type": "audio/wav"})
        assert r.status_code == 201, r.text

        def err(r, status, code, param=None):
            assert r.status_code == status, (r.status_code, r.text)
            e = r.json()["error"]
            assert e["code"] == code and (param is None or e["param"] == param), e

        err(c.post("/v1/voices", json={"name": "bob", "transcript": "x",
                                       "audio": base64.b64encode(wav).decode()}), 409,
            "voice_exists")
        err(c.post("/v1/voices", json={"name": "x", "transcript": "x",
                                       "audio": base64.b64encode(b"RIFF1234WAVE").decode()}), 400,
            "invalid_audio", "audio")
        err(c.post("/v1/voices", json={"name": "x", "transcript": "x", "audio": "@@"}), 400,
            "invalid_value", "audio")
        err(c.post("/v1/voices", json={"name": "../x", "transcript": "x", "audio": "AAAA"}), 400,
            "invalid_voice", "name")
        err(c.post("/v1/voices", json={"name": "x", "audio": "AAAA"}), 400, "missing",
            "transcript")
        err(c.post("/v1/voices", json={"name": "x", "transcript": "a\u0000b", "audio": "AAAA"}),
            400, "invalid_text", "transcript")
        err(c.delete("/v1/voices/default"), 400, "voice_fixed")
        for name in ("bob", "eve"):
            assert c.delete(f"/v1/voices/{name}").json()["deleted"] is True
        err(c.get("/v1/voices/bob"), 404, "voice_not_found")
        err(c.delete("/v1/voices/bob"), 404, "voice_not_found")
        assert os.listdir(folder) == []
