"""The speech server (cosyvoice.server) through a real HTTP client (httpx) against a uvicorn
process: audio equal to the package's in-process synthesis, streaming before the end, SSE, errors
in OpenAI's shape, a client leaving mid-stream (request cancelled, nothing left behind),
queue-full and voice-load failures as 5xx with the server still serving, and the Prometheus
metrics. test_edges.py has the hostile clients, test_openai.py the official client."""
import base64
import io
import json
import re
import threading
import time

import httpx
import numpy as np
import pytest

import cosyvoice

TEXT = "Hello there, this is the speech server speaking."
LONG = {"min_tokens": 400, "max_tokens": 400}   # about 16 s of audio in several chunks


def speech(client, **body):
    body.setdefault("model", "cosyvoice3")
    body.setdefault("voice", "alloy")
    body.setdefault("input", TEXT)
    return client.post("/v1/audio/speech", json=body)


def assert_openai_error(r, status, param=None, code=None, text=None):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"]
    assert err["type"] == ("invalid_request_error" if status < 500 else "server_error")
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    if text is not None:
        assert text in err["message"], err
    return err


def metric(client, name, **labels):
    text = client.get("/metrics").text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pat = "^" + re.escape(name + ("{" + want + "}" if want else "")) + r" (\S+)$"
    m = re.search(pat, text, re.M)
    return float(m.group(1)) if m else 0.0


def wait_engine_idle(client, timeout=30):
    t0 = time.monotonic()
    while True:
        h = client.get("/health").json()
        if h["active"] == 0 and h["queued"] == 0:
            return h
        assert time.monotonic() - t0 < timeout, h
        time.sleep(0.05)


def pcm16(x):
    return cosyvoice.to_pcm16(x)


def test_health_models_voices(client):
    h = client.get("/health")
    assert h.status_code == 200 and h.json()["status"] == "ok"
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert ids[0] == "cosyvoice3" and "tts-1" in ids
    assert [v["id"] for v in client.get("/v1/voices").json()["data"]] == ["alloy", "broken", "nova"]
    # the OpenAPI description has the speech body's schema
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/v1/audio/speech"]["post"]["requestBody"]["content"]["application/json"]
    assert {"model", "input", "voice", "speed", "stream"} <= set(body["schema"]["properties"])


def test_wav_is_the_packages_audio(client, reference):
    r = speech(client, response_format="wav", seed=7)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "audio/wav"
    want = pcm16(reference("alloy", TEXT, seed=7))
    assert r.content[:4] == b"RIFF" and r.content[8:16] == b"WAVEfmt "
    assert r.content[44:] == want
    # pcm is the same samples without a header; the model aliases give the same
    p = speech(client, model="tts-1", response_format="pcm", seed=7)
    assert p.headers["content-type"] == "audio/pcm" and p.content == want
    # another voice and another seed give other audio
    assert speech(client, response_format="pcm", seed=8).content != want
    assert speech(client, voice="nova", response_format="pcm", seed=7).content != want
    # voice as an object ({"id": ...}), as newer OpenAI clients send it
    assert speech(client, voice={"id": "alloy"}, response_format="pcm", seed=7).content == want


def test_sample_rate_speed_and_instructions(client, reference):
    r = speech(client, response_format="pcm", seed=7, sample_rate=16000)
    assert r.content == pcm16(reference("alloy", TEXT, seed=7, sample_rate=16000))
    slow = speech(client, response_format="pcm", seed=7, speed=0.5)
    assert slow.status_code == 200
    assert slow.content == pcm16(reference("alloy", TEXT, seed=7, speed=0.5))
    r = speech(client, response_format="pcm", seed=7, instructions="Speak slowly.")
    assert r.status_code == 200 and r.content == pcm16(
        reference("alloy", TEXT, seed=7, mode="instruct", instruct_text="Speak slowly."))


def test_first_bytes_leave_before_the_end(client):
    arrivals = []
    t0 = time.monotonic()
    with client.stream("POST", "/v1/audio/speech",
                       json={"model": "cosyvoice3", "voice": "alloy", "input": TEXT,
                             "response_format": "pcm", "seed": 3, **LONG}) as r:
        assert r.status_code == 200
        total = 0
        for b in r.iter_raw():
            arrivals.append(time.monotonic() - t0)
            total += len(b)
    assert total == 400 * 960 * 2   # 400 tokens, 960 samples each at 24 kHz, 2 bytes a sample
    assert len(arrivals) >= 3, arrivals
    # the first bytes came long before the last (the engine makes the rest after them)
    assert arrivals[0] < 0.5 * arrivals[-1], arrivals


def test_sse(client, reference):
    with client.stream("POST", "/v1/audio/speech",
                       json={"model": "cosyvoice3", "voice": "alloy", "input": TEXT,
                             "response_format": "pcm", "stream_format": "sse", "seed": 7,
                             "min_tokens": 120, "max_tokens": 120}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2 and events[-1]["type"] == "speech.audio.done"
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert audio == pcm16(reference("alloy", TEXT, seed=7, min_tokens=120, max_tokens=120))
    usage = events[-1]["usage"]
    assert usage["output_tokens"] == 120 and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


@pytest.mark.parametrize("fmt,ctype", [("flac", "audio/flac"), ("opus", "audio/ogg; codecs=opus"),
                                       ("mp3", "audio/mpeg")])
def test_compressed_formats(client, reference, fmt, ctype):
    sf = pytest.importorskip("soundfile")
    r = speech(client, response_format=fmt, seed=7)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == ctype
    want = reference("alloy", TEXT, seed=7)
    if fmt == "flac":   # lossless: the very samples of wav and pcm
        got, rate = sf.read(io.BytesIO(r.content), dtype="int16")
        assert rate == 24000 and got.astype("<i2").tobytes() == pcm16(want)
    else:
        got, rate = sf.read(io.BytesIO(r.content), dtype="float32")
        assert rate == 24000               # lossy: the length within a codec frame or two, and not silence
        assert abs(got.size - want.size) < 2400, (got.size, want.size)
        assert np.sqrt(np.mean(got ** 2)) > 0.2 * np.sqrt(np.mean(want ** 2))


def test_bad_requests_get_openai_errors(client):
    assert_openai_error(speech(client, foo=1), 400, "foo", "extra_forbidden", "foo")
    r = client.post("/v1/audio/speech", json={"model": "cosyvoice3", "voice": "alloy"})
    assert_openai_error(r, 400, "input", "missing")
    assert_openai_error(speech(client, input="   "), 400, "input", "empty_input")
    assert_openai_error(speech(client, input="a" * 4097), 400, "input", "string_above_max_length",
                        "4097")
    assert_openai_error(speech(client, model="whisper-1"), 404, "model", "model_not_found",
                        "whisper-1")
    assert_openai_error(speech(client, voice="bob"), 400, "voice", "voice_not_found", "alloy")
    assert_openai_error(speech(client, voice="../alloy"), 400, "voice", "invalid_voice")
    assert_openai_error(speech(client, response_format="ogg"), 400, "response_format",
                        "invalid_value")
    assert_openai_error(speech(client, response_format="aac"), 400, "response_format",
                        "unsupported_format", "aac")
    assert_openai_error(speech(client, response_format="opus", sample_rate=22050), 400,
                        "response_format", "unsupported_format", "22050")
    assert_openai_error(speech(client, stream_format="chunks"), 400, "stream_format")
    assert_openai_error(speech(client, speed=4.5), 400, "speed", text="0.25 .. 4")
    assert_openai_error(speech(client, speed=0.2), 400, "speed", text="0.25 .. 4")
    assert_openai_error(speech(client, seed=-1), 400, "seed")
    assert_openai_error(speech(client, sample_rate=96000), 400, "sample_rate")
    assert_openai_error(speech(client, min_tokens=10, max_tokens=5), 400, "min_tokens")
    r = client.post("/v1/audio/speech", content=b'{"model": "cosyvoice3", "voice": "alloy", '
                    b'"input": "lone \\ud800 surrogate"}', headers={"content-type": "application/json"})
    assert_openai_error(r, 400, "input", "invalid_text", "UTF-8")
    r = client.get("/v1/nothing-here")
    assert_openai_error(r, 404, code="not_found")
    assert client.get("/health").status_code == 200


def test_voice_that_fails_to_load_is_a_5xx_and_the_server_goes_on(client, reference):
    err = assert_openai_error(speech(client, voice="broken"), 500, code="voice_load_failed")
    assert "broken" in err["message"]
    r = speech(client, response_format="pcm", seed=7)
    assert r.status_code == 200 and r.content == pcm16(reference("alloy", TEXT, seed=7))


def test_client_leaving_mid_stream_cancels_the_request(client):
    before_done = client.get("/health").json()
    gone0 = metric(client, "cosyvoice_client_disconnects_total")
    made0 = metric(client, "cosyvoice_engine_audio_samples_total")
    t0 = time.monotonic()
    with httpx.Client(base_url=str(client.base_url), timeout=60) as c2:
        with c2.stream("POST", "/v1/audio/speech",
                       json={"model": "cosyvoice3", "voice": "alloy", "input": TEXT,
                             "response_format": "wav", "seed": 5, **LONG}) as r:
            assert r.status_code == 200
            first = next(r.iter_raw())
            assert first[:4] == b"RIFF"
        # leaving the block closes the connection with most of the audio unsent
    h = wait_engine_idle(client)
    dt = time.monotonic() - t0
    assert h["active"] == 0 and h["queued"] == 0
    assert metric(client, "cosyvoice_client_disconnects_total") == gone0 + 1
    # the gauge drops when the handler has returned, which may be just after the engine is idle
    t1 = time.monotonic()
    while metric(client, "cosyvoice_requests_in_progress") != 0:
        assert time.monotonic() - t1 < 10, "a request still in progress 10 s after the engine idled"
        time.sleep(0.05)
    assert metric(client, "cosyvoice_speech_requests_total", code="499", format="wav") >= 1
    # the engine stopped early: fewer samples than the 400 tokens' worth it would have made
    made = metric(client, "cosyvoice_engine_audio_samples_total") - made0
    assert 0 < made < 400 * 960, made
    assert dt < 30
    assert before_done["status"] == "ok"


def test_queue_full_is_503_and_the_server_goes_on(client, reference):
    """max_active 2 + max_queued 1: of four long requests at once, at least one is refused."""
    results = []
    lock = threading.Lock()

    def one(i):
        with httpx.Client(base_url=str(client.base_url), timeout=120) as c:
            with c.stream("POST", "/v1/audio/speech",
                          json={"model": "cosyvoice3", "voice": "alloy", "input": TEXT,
                                "response_format": "pcm", "seed": 20 + i, **LONG}) as r:
                if r.status_code == 200:
                    next(r.iter_raw())   # then leave (cancel) to keep the test short
                    out = (200, None)
                else:
                    r.read()
                    out = (r.status_code, r.json(), r.headers.get("retry-after"))
        with lock:
            results.append(out)

    ths = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    refused = [x for x in results if x[0] == 503]
    assert refused, results
    for _, body, retry in refused:
        assert body["error"]["code"] == "queue_full" and body["error"]["type"] == "server_error"
        assert retry == "1"
    assert any(x[0] == 200 for x in results), results
    wait_engine_idle(client)
    r = speech(client, response_format="pcm", seed=7)
    assert r.status_code == 200 and r.content == pcm16(reference("alloy", TEXT, seed=7))


def test_concurrent_streams_each_get_their_own_audio(client, reference):
    out = {}

    def one(seed):
        # max_queued 1: the second submit can find the first not admitted yet (the LLM thread
        # admits asynchronously) and get queue_full with Retry-After, which a client retries
        with httpx.Client(base_url=str(client.base_url), timeout=120) as c:
            for _ in range(50):
                r = speech(c, response_format="pcm", seed=seed)
                if r.status_code != 503:
                    break
                time.sleep(0.05)
            out[seed] = r.content

    ths = [threading.Thread(target=one, args=(s,)) for s in (31, 32)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for s in (31, 32):
        assert out[s] == pcm16(reference("alloy", TEXT, seed=s))


def test_metrics(client):
    speech(client, response_format="wav", seed=1)
    text = client.get("/metrics")
    assert text.headers["content-type"].startswith("text/plain; version=0.0.4")
    body = text.text
    for name in ("cosyvoice_speech_requests_total", "cosyvoice_ttfb_seconds",
                 "cosyvoice_engine_active", "cosyvoice_engine_queued",
                 "cosyvoice_requests_in_progress", "cosyvoice_audio_seconds_total"):
        assert f"# TYPE {name} " in body, name
    assert metric(client, "cosyvoice_speech_requests_total", code="200", format="wav") >= 1
    n = metric(client, "cosyvoice_ttfb_seconds_count")
    assert n >= 1
    assert metric(client, "cosyvoice_ttfb_seconds_bucket", le="+Inf") == n
    assert metric(client, "cosyvoice_audio_seconds_total") > 0
    assert "cosyvoice_gpu_memory_bytes" not in body   # a CPU engine has no device memory
