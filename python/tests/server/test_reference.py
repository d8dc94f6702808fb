"""Reference recordings sent with a request (refvoice.py): POST /v1/audio/speech with "voice":
{"audio": base64 WAV, "text": transcript}, through the official `openai` client (extra_body, and
the voice argument itself) and raw HTTP, and a WebSocket session's voice. The audio equals that
of the same recording saved through POST /v1/voices (same seed); the cache (metrics) clones a
recording once, evicts the least recently used and keeps what a client that left had cloned;
bad base64, not a WAV, an empty transcript, audio the library refuses and oversize uploads are
400 or 413 errors naming the field."""
import base64
import io
import json
import os
import socket
import struct
import threading
import time

import httpx
import numpy as np
import pytest

import cosyvoice
from server_support import start_server, stop_server

openai = pytest.importorskip("openai")

TEXT = "Hello there, this is the speech server speaking."
PROMPT = "Some words of the prompt."
MAX_BODY = 65536
MAX_UPLOAD = 800000
CACHE = 2


def tone_wav(seconds=2.0, f0=150.0, rate=24000, bits=16):
    """A modulated tone as WAV bytes (16-bit, or 8-bit unsigned)."""
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * f0 * t) * (1 + 0.3 * np.sin(2 * np.pi * 2 * t))
    if bits == 16:
        data = cosyvoice.to_pcm16(x)
    else:
        data = np.clip(np.rint(x * 127 + 128), 0, 255).astype(np.uint8).tobytes()
    head = (b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * bits // 8, bits // 8, bits) +
            b"data" + struct.pack("<I", len(data)))
    return head + data


def ref(wav, text=PROMPT):
    return {"audio": base64.b64encode(wav).decode(), "text": text}


WAV = tone_wav()   # 96 KB: its base64 alone is above MAX_BODY


@pytest.fixture(scope="module")
def srv(fe_model, tmp_path_factory):
    """Base URL of a server with the front-end model, an empty voices folder, 64 KiB bodies,
    800 kB uploads and a cache of 2 reference voices."""
    d = tmp_path_factory.mktemp("ref")
    os.makedirs(d / "voices")
    proc, url, log = start_server(fe_model, str(d), "--voices", str(d / "voices"),
                                  "--max-body-bytes", str(MAX_BODY), "--max-upload-bytes",
                                  str(MAX_UPLOAD), "--reference-cache-size", str(CACHE))
    yield url
    stop_server(proc, log)


@pytest.fixture(scope="module")
def hc(srv):
    with httpx.Client(base_url=srv, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def oa(srv):
    with openai.OpenAI(base_url=srv + "/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def saved(hc):
    """The name of the voice POST /v1/voices made of WAV and PROMPT."""
    r = hc.post("/v1/voices", json={"name": "saved", "transcript": PROMPT,
                                    "audio": base64.b64encode(WAV).decode()})
    assert r.status_code == 201, r.text
    return "saved"


def results(c):
    """The reference cache's counters and gauges from /metrics."""
    out = {"cloned": 0, "cached": 0, "joined": 0, "failed": 0}
    for line in c.get("/metrics").text.splitlines():
        if line.startswith("cosyvoice_reference_voices_total{"):
            out[line.split('"')[1]] = int(float(line.split()[-1]))
        elif line.startswith("cosyvoice_reference_cache_"):
            out[line.split()[0][len("cosyvoice_reference_cache_"):]] = int(float(line.split()[-1]))
    return out


def delta(before, after):
    return {k: after[k] - before[k] for k in ("cloned", "cached", "joined", "failed")}


def speech(c, voice, seed=3, **kw):
    body = {"model": "tts-1", "input": TEXT, "voice": voice, "response_format": "pcm",
            "seed": seed, **kw}
    return c.post("/v1/audio/speech", json=body)


def test_reference_equals_the_saved_voice_through_the_openai_client(oa, hc, saved, fe_model):
    want = speech(hc, saved).content
    assert len(want) > 1000
    with cosyvoice.Engine(fe_model) as eng, \
            eng.voice_from_audio(*cosyvoice.audio.decode_wav(WAV), PROMPT) as v:
        assert want == cosyvoice.to_pcm16(eng.synthesize(v, TEXT, seed=3))
    # extra_body's voice replaces the required voice argument
    got = oa.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format="pcm",
                                 extra_body={"voice": ref(WAV), "seed": 3}).read()
    assert got == want
    # or the object as the voice argument itself (OpenAI's custom voice object, extended)
    got = oa.audio.speech.create(model="tts-1", voice=ref(WAV), input=TEXT,  # type: ignore
                                 response_format="pcm", extra_body={"seed": 3}).read()
    assert got == want
    # streamed, and a whole WAV
    with oa.audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=TEXT, response_format="pcm",
            extra_body={"voice": ref(WAV), "seed": 3}) as r:
        assert b"".join(r.iter_bytes()) == want
    wav = speech(hc, ref(WAV), response_format="wav", stream=False).content
    assert wav[44:] == want


def test_raw_http_and_a_data_url(hc, saved):
    want = speech(hc, saved, seed=8).content
    r = speech(hc, ref(WAV), seed=8)
    assert r.status_code == 200 and r.content == want
    url = {"audio": "data:audio/wav;base64," + base64.b64encode(WAV).decode(), "text": PROMPT}
    assert speech(hc, url, seed=8).content == want
    # SSE
    r = speech(hc, ref(WAV), seed=8, stream_format="sse", response_format="pcm")
    audio = b"".join(base64.b64decode(json.loads(line[6:])["audio"])
                     for line in r.text.splitlines()
                     if line.startswith("data: ") and "speech.audio.delta" in line)
    assert audio == want


def test_cache_clones_once_and_evicts_the_least_recently_used(hc):
    a, b = tone_wav(f0=170.0), tone_wav(f0=190.0)
    before = results(hc)
    assert speech(hc, ref(a)).status_code == 200
    assert delta(before, results(hc)) == {"cloned": 1, "cached": 0, "joined": 0, "failed": 0}
    first = speech(hc, ref(a)).content
    assert delta(before, results(hc))["cached"] == 1
    # the transcript is part of the key
    other = speech(hc, ref(a, "Other words here.")).content
    assert delta(before, results(hc))["cloned"] == 2 and other != first
    # a third recording: the cache holds CACHE = 2, and a was used least recently
    assert speech(hc, ref(b)).status_code == 200
    now = results(hc)
    assert delta(before, now)["cloned"] == 3 and now["voices"] == CACHE
    assert now["bytes"] > 0
    assert speech(hc, ref(a)).content == first          # cloned again: same voice, same audio
    assert delta(before, results(hc))["cloned"] == 4


def test_concurrent_identical_references_share_one_clone(srv):
    wav = tone_wav(f0=210.0)
    out = []

    def go():
        with httpx.Client(base_url=srv, timeout=120) as c:
            out.append(speech(c, ref(wav)).content)

    with httpx.Client(base_url=srv, timeout=120) as c:
        before = results(c)
        ts = [threading.Thread(target=go) for _ in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        d = delta(before, results(c))
    assert len(out) == 3 and out[0] == out[1] == out[2] and len(out[0]) > 1000
    assert d["cloned"] == 1 and d["joined"] + d["cached"] == 2, d


def err(r, status, param, code, text=None):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert (e["param"], e["code"]) == (param, code), e
    if text is not None:
        assert text in e["message"], e


def test_bad_references_are_400_naming_the_field(hc, oa):
    b64 = base64.b64encode(WAV).decode()
    err(speech(hc, {"audio": "@@not base64@@", "text": "x"}), 400, "voice.audio",
        "invalid_base64")
    err(speech(hc, {"audio": base64.b64encode(b"RIFF....WAVEjunk").decode(), "text": "x"}), 400,
        "voice.audio", "invalid_audio", "no fmt chunk")
    err(speech(hc, {"audio": base64.b64encode(b"ID3 an mp3").decode(), "text": "x"}), 400,
        "voice.audio", "invalid_audio", "not a RIFF/WAVE file")
    err(speech(hc, {"audio": "", "text": "x"}), 400, "voice.audio", "invalid_value")
    err(speech(hc, {"audio": 5, "text": "x"}), 400, "voice.audio", "invalid_type")
    err(speech(hc, {"text": "x"}), 400, "voice.audio", "missing")
    err(speech(hc, {"audio": b64}), 400, "voice.text", "missing")
    err(speech(hc, {"audio": b64, "text": "  "}), 400, "voice.text", "empty_text")
    err(speech(hc, {"audio": b64, "text": "a\u0000b"}), 400, "voice.text", "invalid_text")
    err(speech(hc, {"audio": b64, "text": "x" * 1001}), 400, "voice.text",
        "string_above_max_length")
    err(speech(hc, {"audio": b64, "text": "x", "lang": "en"}), 400, "voice.lang",
        "extra_forbidden")
    err(speech(hc, {"id": "saved", "audio": "AAAA"}), 400, "voice", "invalid_voice")
    # what the library refuses (cosy_voice_from_audio's limits)
    err(speech(hc, ref(tone_wav(0.3))), 400, "voice.audio", "invalid_value", "at least 0.5 s")
    err(speech(hc, ref(tone_wav(31.0, rate=16000, bits=8))), 400, "voice.audio",
        "invalid_value", "at most 30 s")
    silent = WAV[:44] + bytes(len(WAV) - 44)
    err(speech(hc, ref(silent)), 400, "voice.audio", "invalid_value", "silent")
    # the official client sees the same errors
    with pytest.raises(openai.BadRequestError) as e:
        oa.audio.speech.create(model="tts-1", voice="alloy", input=TEXT,
                               extra_body={"voice": {"audio": "@@", "text": "x"}})
    assert e.value.body["param"] == "voice.audio"
    # failures are counted, and the server goes on
    assert results(hc)["failed"] >= 4
    assert speech(hc, "saved").status_code == 200


def test_upload_limits(hc, srv):
    port = int(srv.rsplit(":", 1)[1])
    # a reference may take the body up to MAX_UPLOAD ...
    big = tone_wav(16.0, rate=16000)                       # 512 kB, 683 kB in base64
    assert MAX_BODY < len(base64.b64encode(big)) < MAX_UPLOAD
    assert speech(hc, ref(big), max_tokens=20).status_code == 200
    # ... not beyond (refused from its Content-Length, before it is read) ...
    head, body = raw(port, b"Content-Length: %d\r\n\r\n" % (MAX_UPLOAD + 1))
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(body)["error"]["code"] == "request_too_large"
    assert str(MAX_UPLOAD) in json.loads(body)["error"]["message"]
    # ... and nothing else may take it beyond MAX_BODY
    r = speech(hc, "saved", user="x" * (MAX_BODY + 10))
    err(r, 413, None, "request_too_large", "reference recording")
    n = MAX_BODY + 100   # chunked, not even JSON
    head, body = raw(port, b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % n + b" " * n +
                     b"\r\n0\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert json.loads(body)["error"]["code"] == "request_too_large"


def raw(port, rest):
    """(head, body) of the answer to POST /v1/audio/speech with the headers and body rest."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                  b"Content-Type: application/json\r\n" + rest)
        data = b""
        while True:
            got = s.recv(65536)
            if not got:
                break
            data += got
    head, _, body = data.partition(b"\r\n\r\n")
    return head, body


def test_client_leaving_while_its_voice_is_made(hc, srv):
    """The clone finishes on its thread and lands in the cache; the request is gone; nothing
    else stays (requests in progress back to 0)."""
    port = int(srv.rsplit(":", 1)[1])
    wav = tone_wav(f0=230.0)
    before = results(hc)
    body = json.dumps({"model": "tts-1", "input": TEXT, "voice": ref(wav),
                       "response_format": "pcm"}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.05)
    s.close()
    t0 = time.monotonic()
    while True:
        h = hc.get("/health").json()
        d = delta(before, results(hc))
        if d["cloned"] == 1 and h["requests_in_progress"] == 0 and h["active"] == 0 \
                and h["queued"] == 0:
            break
        assert time.monotonic() - t0 < 30, (h, d)
        time.sleep(0.05)
    # the clone it paid for serves the next request that sends the same recording
    assert speech(hc, ref(wav)).status_code == 200
    assert delta(before, results(hc))["cloned"] == 1


def test_websocket_session_with_a_reference(srv, saved):
    ws_client = pytest.importorskip("websockets.sync.client")
    url = srv.replace("http://", "ws://") + "/v1/audio/speech/stream"

    def session(voice):
        with ws_client.connect(url, max_size=None, open_timeout=30) as ws:
            ws.send(json.dumps({"type": "session", "voice": voice, "seed": 4}))
            ev = json.loads(ws.recv(timeout=60))
            assert ev["type"] == "session", ev
            for i in range(0, len(TEXT), 5):
                ws.send(json.dumps({"type": "text", "text": TEXT[i:i + 5]}))
            ws.send(json.dumps({"type": "end"}))
            audio = b""
            while True:
                m = ws.recv(timeout=120)
                if isinstance(m, bytes):
                    audio += m
                    continue
                m = json.loads(m)
                assert m["type"] != "error", m
                if m["type"] == "done":
                    return ev, audio

    ev_named, want = session(saved)
    ev, got = session(ref(WAV))      # a message above MAX_BODY: the recording makes it so
    assert got == want and len(got) > 1000
    assert set(ev["voice"]) == {"reference"} and len(ev["voice"]["reference"]) == 64
    with ws_client.connect(url, max_size=None, open_timeout=30) as ws:
        # a bad reference is an error event; the session goes on with its settings
        ws.send(json.dumps({"type": "session", "voice": {"audio": "@@", "text": "x"}}))
        e = json.loads(ws.recv(timeout=60))
        assert e["type"] == "error" and e["error"]["param"] == "voice.audio", e
        ws.send(json.dumps({"type": "session", "voice": {"audio": ref(WAV)["audio"], "text": ""}}))
        e = json.loads(ws.recv(timeout=60))
        assert e["type"] == "error" and e["error"]["param"] == "voice.text", e
        # a large message without a recording is refused
        ws.send(json.dumps({"type": "text", "text": "x", "pad": "y" * MAX_BODY}))
        e = json.loads(ws.recv(timeout=60))
        assert e["type"] == "error" and e["error"]["code"] == "message_too_large", e
        ws.send(json.dumps({"type": "session", "voice": saved}))
        assert json.loads(ws.recv(timeout=60))["voice"] == saved
