"""The streaming WebSocket endpoint (/v1/audio/speech/stream) through a real WebSocket client (the
`websockets` package) against the server process: many small text pieces give the audio of the
package's in-process text streaming, two utterances on one connection, cancel in the middle of
speech, a flush, a closed socket, mu-law and A-law decoded back, bad messages answered with error
events while the session goes on, a stalled utterance ended, the chat_to_speech example."""
import base64
import json
import os
import time

import numpy as np
import pytest

import cosyvoice

ws_client = pytest.importorskip("websockets.sync.client")

TEXT = ("Hello there, this is the speech server speaking. It reads the words as they come, "
        "one small piece at a time.")
LONG_TEXT = " ".join(["This sentence is long enough to keep the engine busy for a while, and "
                      "then some more."] * 6)


@pytest.fixture(scope="module")
def ws_url(server):
    return server[0].replace("http://", "ws://") + "/v1/audio/speech/stream"


@pytest.fixture(scope="module")
def streamed(model_path, voices_dir):
    """streamed(pieces, **params): the in-process text-streaming audio of voice alloy."""
    eng = cosyvoice.Engine(model_path)
    v = eng.load_voice(os.path.join(voices_dir, "alloy.gguf"))

    def run(pieces, **kw):
        chunks = list(eng.stream_text(v, pieces, **kw))
        return np.concatenate(chunks) if chunks else np.zeros(0, np.float32)

    yield run
    v.close()
    eng.close()


@pytest.fixture(scope="module")
def piece_marks(model_path, voices_dir):
    """piece_marks(pieces, **params): for each piece, the sample where the library's text marks
    (Request.text_marks) say its speech can start: the mark of the unit holding its first byte
    (the in-process reference for the server's mark events)."""
    eng = cosyvoice.Engine(model_path)
    v = eng.load_voice(os.path.join(voices_dir, "alloy.gguf"))

    def run(pieces, **kw):
        with eng.submit_text_stream(v, **kw) as r:
            for p in pieces:
                r.push_text(p)
            r.end_text()
            for _ in r:
                pass
            marks = r.text_marks()
        out, b = [], 0
        for p in pieces:
            unit = [m for m in marks if m.text_begin <= b < m.text_end]
            assert len(unit) == 1, (p, b, marks)
            out.append(unit[0].sample)
            b += len(p.encode())
        return out

    yield run
    v.close()
    eng.close()


def pieces_of(text, n=3):
    """text in pieces of n characters (a chat model's tokens, roughly)."""
    return [text[i:i + n] for i in range(0, len(text), n)]


class Conn:
    def __init__(self, url):
        self.cm = ws_client.connect(url, max_size=None, open_timeout=30)
        self.ws = self.cm.__enter__()

    def send(self, **msg):
        self.ws.send(json.dumps(msg))

    def recv(self, timeout=60):
        m = self.ws.recv(timeout=timeout)
        return m if isinstance(m, bytes) else json.loads(m)

    def event(self, type_, timeout=60):
        """The next JSON event (binary frames before it are returned too)."""
        audio = b""
        while True:
            m = self.recv(timeout)
            if isinstance(m, bytes):
                audio += m
                continue
            if m["type"] == type_:
                return m, audio
            assert m["type"] != "error", m

    def stream(self, timeout=120, end=("done",)):
        """Every message up to the utterance's done (or cancelled): ([(event, samples of audio
        received before it)], audio bytes, the last event); base64 audio events count as
        audio. Bytes per sample: 2 (pcm) unless the caller divides otherwise."""
        events, audio = [], b""
        while True:
            m = self.recv(timeout)
            if isinstance(m, bytes):
                audio += m
                continue
            if m["type"] == "audio":
                audio += base64.b64decode(m["audio"])
                continue
            assert m["type"] != "error", m
            events.append((m, len(audio)))
            if m["type"] in end:
                return events, audio, m

    def utterance(self, timeout=120):
        """Audio bytes and the done event of the utterance in flight."""
        started, _ = self.event("started", timeout)
        done, audio = self.event("done", timeout)
        assert done["utterance"] == started["utterance"]
        return audio, done

    def close(self):
        self.cm.__exit__(None, None, None)


def health(client):
    return client.get("/health").json()


def wait_idle(client, limit=30):
    t0 = time.monotonic()
    while True:
        h = health(client)
        assert "active" in h, h  # a /health answer without the counts: say what it was
        if h["active"] == 0 and h["queued"] == 0:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < limit, h
        time.sleep(0.02)


def test_small_pieces_give_the_in_process_audio(ws_url, streamed):
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=5)
    ev = c.recv()
    assert ev["type"] == "session" and ev["voice"] == "alloy" and ev["sample_rate"] == 24000
    pieces = pieces_of(TEXT)
    for p in pieces:
        c.send(type="text", text=p)
    c.send(type="end")
    audio, done = c.utterance()
    want = cosyvoice.to_pcm16(streamed(pieces, seed=5))
    assert audio == want
    assert done["samples"] * 2 == len(audio) and done["usage"]["output_tokens"] > 0
    assert done["timings"]["first_audio_s"] <= done["timings"]["total_s"]
    # a second utterance on the same connection, its own audio
    c.send(type="text", text="A second thing to say, ")
    c.send(type="text", text="in two pieces.")
    c.send(type="end")
    audio2, done2 = c.utterance()
    assert done2["utterance"] == done["utterance"] + 1
    assert audio2 == cosyvoice.to_pcm16(streamed(["A second thing to say, in two pieces."],
                                                 seed=5))
    c.close()


def test_flush_speaks_what_is_pending_and_the_utterance_goes_on(ws_url, streamed):
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=8, binary=False)
    c.recv()
    a, b = pieces_of("First part, said now.", 4), pieces_of("Then the rest of it.", 4)
    for p in a:
        c.send(type="text", text=p)
    c.send(type="flush")
    for p in b:
        c.send(type="text", text=p)
    c.send(type="end")
    assert c.recv()["type"] == "started"
    audio = b""
    marks = []
    while True:
        m = c.recv(120)
        assert isinstance(m, dict), "binary false: audio comes in events"
        if m["type"] == "audio":
            audio += base64.b64decode(m["audio"])
            continue
        if m["type"] == "mark":
            assert m["sample"] * 2 == len(audio)   # in order with the audio
            marks.append(m)
            continue
        assert m["type"] == "done", m
        break
    c.close()
    # one engine request per flush, each with the session's seed
    first = cosyvoice.to_pcm16(streamed(a, seed=8))
    want = first + cosyvoice.to_pcm16(streamed(b, seed=8))
    assert audio == want and m["samples"] * 2 == len(audio)
    # the second request's marks count on from the first one's audio
    assert [k["piece"] for k in marks] == list(range(len(a) + len(b)))
    assert m["pieces"] == m["marks"] == len(a) + len(b)
    assert all(k["sample"] * 2 >= len(first) for k in marks[len(a):])


def test_cancel_in_the_middle_of_speech(ws_url, client):
    wait_idle(client)
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=2)
    c.recv()
    for p in pieces_of(LONG_TEXT, 40):
        c.send(type="text", text=p)
    c.send(type="end")
    assert c.recv()["type"] == "started"
    n_marks = 0
    while True:
        first = c.recv(120)
        if isinstance(first, bytes):
            break
        assert first["type"] == "mark" and first["sample"] == 0, first
        n_marks += 1
    assert first
    c.send(type="cancel")
    got = len(first)
    while True:
        m = c.recv(30)
        if isinstance(m, bytes):   # sent before the server saw the cancel
            got += len(m)
            continue
        if m["type"] == "mark":
            assert m["sample"] * 2 == got
            n_marks += 1
            continue
        assert m["type"] == "cancelled", m
        break
    assert m["samples"] * 2 == got, (m, got)
    assert m["marks"] == n_marks and m["pieces"] == len(pieces_of(LONG_TEXT, 40))
    # nothing more of it; the session goes on
    c.send(type="text", text="Short.")
    c.send(type="end")
    audio, done = c.utterance()
    assert audio and done["utterance"] == m["utterance"] + 1
    c.close()
    wait_idle(client)


def check_marks(events, pieces, want, bytes_per_sample, rate):
    """The mark events of one utterance: one per piece, in order, each right after the audio
    before its sample, at the in-process library marks (want), with the pieces' characters."""
    marks = [(m, n) for m, n in events if m["type"] == "mark"]
    assert [m["piece"] for m, _ in marks] == list(range(len(pieces)))
    c = 0
    for (m, n), p, w in zip(marks, pieces, want):
        assert (m["text_begin"], m["text_end"]) == (c, c + len(p))
        assert m["sample"] == w, (m, w)
        assert m["sample"] * bytes_per_sample == n, (m, n)
        assert m["ms"] == pytest.approx(m["sample"] * 1000 / rate)
        c += len(p)
    return [m for m, _ in marks]


def test_marks_tie_the_pieces_to_the_audio(ws_url, piece_marks):
    """A mark event per text piece, in order with the audio, at the library's marks; done says
    how many; the same at 8 kHz mu-law (samples at the output rate); pieces cut inside words and
    across sentences."""
    text = ("Sure! The train leaves at nine tomorrow. Then it stops twice, "
            "once in Lyon and once in Dijon. Café?")
    pieces = pieces_of(text, 7)
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=11)
    c.recv()
    for p in pieces:
        c.send(type="text", text=p)
    c.send(type="end")
    events, audio, done = c.stream()
    want = piece_marks(pieces, seed=11)
    marks = check_marks(events, pieces, want, 2, 24000)
    assert done["pieces"] == done["marks"] == len(pieces)
    # normalization on: a unit is a sentence, so the pieces of one sentence share its mark
    assert len(set(m["sample"] for m in marks)) <= 4 and marks[0]["sample"] == 0
    assert marks[-1]["sample"] < done["samples"]
    # phone line: the marks at 8000 Hz
    c.send(type="session", response_format="mulaw", sample_rate=8000)
    c.recv()
    for p in pieces:
        c.send(type="text", text=p)
    c.send(type="end")
    events, audio, done = c.stream()
    check_marks(events, pieces, piece_marks(pieces, seed=11, sample_rate=8000), 1, 8000)
    c.close()


def test_marks_after_a_cancel_say_what_was_not_heard(ws_url, client, piece_marks):
    """Cancelled mid-speech: the marks sent are those of the pieces whose speech could have
    started in the audio sent; every later piece's library mark is at or after the last sample
    sent (it was not heard)."""
    wait_idle(client)
    pieces = [w + " " for w in LONG_TEXT.split(" ")]
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=12)
    c.recv()
    for p in pieces:
        c.send(type="text", text=p)
    c.send(type="end")
    got, events = 0, []
    while True:
        m = c.recv(120)
        if isinstance(m, bytes):
            got += len(m)
            if got >= 2 * 24000 * 2:   # two seconds heard: barge in
                c.send(type="cancel")
                break
            continue
        events.append((m, got))
    while True:
        m = c.recv(30)
        if isinstance(m, bytes):
            got += len(m)
            continue
        if m["type"] == "cancelled":
            break
        events.append((m, got))
    marks = [e for e, _ in events if e["type"] == "mark"]
    assert m["marks"] == len(marks) and m["samples"] * 2 == got
    want = piece_marks(pieces, seed=12)
    k = m["marks"]
    assert 0 < k < len(pieces)
    assert all(want[i] <= m["samples"] for i in range(k))
    assert all(want[i] >= m["samples"] for i in range(k, len(pieces)))
    assert [e["sample"] for e in marks] == want[:k]
    c.close()
    wait_idle(client)


def test_closed_socket_cancels_everything(ws_url, client):
    wait_idle(client)
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=3)
    c.recv()
    c.send(type="text", text=LONG_TEXT)
    c.send(type="end")
    assert c.recv()["type"] == "started"
    assert c.recv(120)["type"] == "mark"   # its one piece: speech for it can start at once
    assert isinstance(c.recv(120), bytes)
    calls = health(client)["engine_calls"]
    c.close()
    wait_idle(client)   # within the engine call that ran (test_edges.py measures the bound)
    now = health(client)["engine_calls"]
    assert now["flow"] - calls["flow"] <= 2 and now["vocoder"] - calls["vocoder"] <= 2


def mulaw_decode(b):
    """G.711 mu-law to 16-bit values (the table construction of the standard)."""
    u = ~np.frombuffer(b, np.uint8).astype(np.int32) & 0xFF
    exp, mant = (u >> 4) & 7, u & 0x0F
    mag = (((mant << 3) + 0x84) << exp) - 0x84
    return np.where(u & 0x80, -mag, mag)


def alaw_decode(b):
    a = np.frombuffer(b, np.uint8).astype(np.int32) ^ 0x55
    exp, mant = (a >> 4) & 7, a & 0x0F
    mag = np.where(exp == 0, (mant << 4) + 8, ((mant << 4) + 0x108) << np.maximum(exp - 1, 0))
    return np.where(a & 0x80, mag, -mag)


@pytest.mark.parametrize("fmt,decode", [("mulaw", mulaw_decode), ("alaw", alaw_decode)])
def test_phone_formats_decode_back(ws_url, streamed, fmt, decode):
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=4, response_format=fmt, sample_rate=8000)
    c.recv()
    c.send(type="text", text="Hello from the phone line.")
    c.send(type="end")
    audio, done = c.utterance()
    c.close()
    want = streamed(["Hello from the phone line."], seed=4, sample_rate=8000)
    assert len(audio) == want.size == done["samples"]
    got = decode(audio) / 32768.0
    # G.711 keeps about 4% of the magnitude (plus a small step near zero)
    err = np.abs(got - np.clip(want, -1, 1))
    assert np.all(err <= 0.04 * np.abs(want) + 2e-3), float(err.max())
    assert np.sqrt(np.mean(want ** 2)) > 0.01


def test_bad_messages_get_error_events_and_the_session_goes_on(ws_url):
    c = Conn(ws_url)

    def err(code=None, param=None):
        m = c.recv()
        assert m["type"] == "error", m
        e = m["error"]
        assert set(e) == {"message", "type", "param", "code"} and e["message"]
        if code is not None:
            assert e["code"] == code, e
        if param is not None:
            assert e["param"] == param, e
        return e

    c.ws.send("{not json")
    err("invalid_json")
    c.ws.send(b"\x00\x01")
    err("invalid_message")
    c.send(type="speak", text="hi")
    err("invalid_message", "type")
    c.send(type="text", text="Before any voice.")
    err("missing", "voice")
    c.send(type="session", voice="bob")
    err("voice_not_found", "voice")
    c.send(type="session", voice="alloy", instructions="Speak slowly.")
    err("extra_forbidden", "instructions")
    c.send(type="session", voice="alloy", response_format="mp3")
    err("invalid_value", "response_format")
    c.send(type="session", voice="alloy", sample_rate=96000)
    err("invalid_value", "sample_rate")
    c.send(type="session", voice="alloy", seed=1)
    assert c.recv()["type"] == "session"
    c.send(type="text", text="nul \u0000 inside")
    err("invalid_text", "text")
    c.send(type="text", text="x" * 4097)
    err("string_above_max_length", "text")
    c.send(type="text", text=7)
    err("invalid_type", "text")
    # still a working session
    c.send(type="text", text="Still here.")
    c.send(type="end")
    audio, done = c.utterance()
    assert audio and done["samples"] * 2 == len(audio)
    c.close()


@pytest.mark.parametrize("fmt,decode", [("mulaw", mulaw_decode), ("alaw", alaw_decode)])
def test_phone_formats_on_the_http_endpoint(client, reference, fmt, decode):
    r = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "seed": 4,
                                              "input": "Hello from the phone line.",
                                              "response_format": fmt, "sample_rate": 8000})
    assert r.status_code == 200 and r.headers["content-type"] == f"audio/x-{fmt}"
    want = reference("alloy", "Hello from the phone line.", seed=4, sample_rate=8000)
    got = decode(r.content) / 32768.0
    assert got.size == want.size
    assert np.all(np.abs(got - np.clip(want, -1, 1)) <= 0.04 * np.abs(want) + 2e-3)


def test_g711_on_random_samples():
    """The server's encoders against the decoders above on random samples over the whole range
    (full scale and near zero included)."""
    from cosyvoice.server.encoders import encode_raw
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-1, 1, 20000), rng.uniform(-0.01, 0.01, 20000),
                        [1.0, -1.0, 0.0, 1.2, -1.2]]).astype(np.float32)
    for fmt, decode in (("mulaw", mulaw_decode), ("alaw", alaw_decode)):
        y = decode(encode_raw(fmt, x)) / 32768.0
        err = np.abs(y - np.clip(x, -1, 1))
        assert np.all(err <= 0.04 * np.abs(x) + 2e-3), (fmt, float(err.max()))


class ChatStandIn:
    """A stand-in chat endpoint (OpenAI's streamed chat completions, server-sent events) that
    writes `reply`, one piece every `delay` seconds, on a loopback port; url: its base URL."""

    def __init__(self, reply, delay=0.05):
        import http.server
        import threading

        class Chat(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["content-length"]))
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                try:
                    for piece in reply + [None]:
                        choice = {"index": 0, "delta": {"content": piece} if piece else {},
                                  "finish_reason": None if piece else "stop"}
                        ev = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                              "model": "m", "choices": [choice]}
                        self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
                        self.wfile.flush()
                        time.sleep(delay)   # a model writing
                    self.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass   # the client stopped reading (a barge-in)

            def log_message(self, *args):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Chat)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.srv.shutdown()


def run_chat_to_speech(chat_url, ws_url, *args):
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "python",
                          "chat_to_speech.py")
    return subprocess.run([sys.executable, script, "--chat-url", chat_url, "--chat-model", "m",
                           "--prompt", "When is the train?", "--tts", ws_url, "--voice", "alloy",
                           *args], capture_output=True, text=True, timeout=300)


def test_the_chat_to_speech_example(ws_url, streamed, tmp_path):
    """examples/python/chat_to_speech.py against a stand-in chat endpoint (OpenAI's streamed chat
    completions, server-sent events) and the server: the reply's audio, as in process."""
    pytest.importorskip("openai")
    reply = ["Sure", "! The", " train", " leaves", " at nine", " tomorrow."]
    out = tmp_path / "reply.wav"
    with ChatStandIn(reply) as chat:
        r = run_chat_to_speech(chat.url, ws_url, "--seed", "6", "-o", str(out))
    assert r.returncode == 0, r.stderr
    data = out.read_bytes()
    want = streamed(["".join(reply)], seed=6)
    assert data[:44] == cosyvoice.wav_header(24000, want.size)
    assert data[44:] == cosyvoice.to_pcm16(want)
    assert "Sure! The train leaves at nine tomorrow." in r.stderr
    assert "heard:" not in r.stderr


def test_the_chat_to_speech_example_interrupted(ws_url, streamed, piece_marks, tmp_path):
    """chat_to_speech.py --interrupt-after 2: a barge-in after 2 s of audio, while the chat model
    may still be writing. The audio it got is the start of the in-process audio of the whole
    reply; the text it says was heard is the pieces whose in-process mark (Request.text_marks,
    the mark of the unit holding the piece's first byte) is below the samples sent, joined: a
    prefix of the reply, not empty (the first piece's mark is 0), and here not all of it (with
    this text and seed the later sentences' marks are past 2 s of audio, so the check can
    fail both ways)."""
    pytest.importorskip("openai")
    text = ("Sure! The train leaves at nine tomorrow. "
            + " ".join(["Bring your ticket and a warm coat, it will be cold on the platform in "
                        "the morning."] * 4))
    reply = pieces_of(text, 4)
    out = tmp_path / "cut.wav"
    with ChatStandIn(reply) as chat:
        r = run_chat_to_speech(chat.url, ws_url, "--seed", "6", "-o", str(out),
                               "--interrupt-after", "2")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("heard: ")]
    assert len(lines) == 1, r.stderr
    heard = json.loads(lines[0][len("heard: "):])
    data = out.read_bytes()
    n = (len(data) - 44) // 2
    assert f"interrupted after {n} samples" in r.stderr, r.stderr
    assert n >= 2 * 24000
    want = cosyvoice.to_pcm16(streamed(reply, seed=6))
    assert len(want) > 2 * n and data[44:] == want[:2 * n]
    marks = piece_marks(reply, seed=6)
    assert marks[0] == 0
    assert heard == "".join(p for p, m in zip(reply, marks) if m < n), (n, marks)
    assert heard and text.startswith(heard) and len(heard) < len(text), (heard, n, marks)


def test_a_stalled_utterance_is_ended(ws_url, streamed, client):
    """The shared server ends an utterance after 3 s without a message (--ws-idle-timeout)."""
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=9)
    c.recv()
    t0 = time.monotonic()
    c.send(type="text", text="Words and then nothing")
    assert c.recv()["type"] == "started"
    audio = b""
    events = []
    while True:
        m = c.recv(60)
        if isinstance(m, bytes):
            audio += m
            continue
        events.append(m)
        if m["type"] == "done":
            break
    assert any(e["type"] == "error" and e["error"]["code"] == "idle_timeout" for e in events)
    assert time.monotonic() - t0 > 2.5
    assert audio == cosyvoice.to_pcm16(streamed(["Words and then nothing"], seed=9))
    c.close()
    wait_idle(client)


def test_max_tokens_bounds_an_utterance(ws_url, streamed, client):
    """The session's max_tokens reaches the engine (bench/serve_ws.py bounds random-weight
    utterances with it): the audio is the in-process audio with the same bound, shorter than
    without it (the small model does not stop within 20 tokens on this text and seed; the bound
    also allows max_tokens / 2 text tokens); null lifts it again; bad values are error events."""
    text = "Hello there, how are you today?"
    pieces = pieces_of(text, 5)
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=11, max_tokens=20)
    assert c.recv()["max_tokens"] == 20
    for p in pieces:
        c.send(type="text", text=p)
    c.send(type="end")
    audio, done = c.utterance()
    assert audio == cosyvoice.to_pcm16(streamed(pieces, seed=11, max_tokens=20))
    assert 0 < done["usage"]["output_tokens"] <= 20
    for v in (0, -1, 2**31, 1.5, True, "9"):
        c.send(type="session", max_tokens=v)
        m = c.recv()
        assert m["type"] == "error" and m["error"]["param"] == "max_tokens", (v, m)
    c.send(type="session", max_tokens=None)
    assert c.recv()["max_tokens"] is None
    for p in pieces:
        c.send(type="text", text=p)
    c.send(type="end")
    unbounded, done = c.utterance()
    assert unbounded == cosyvoice.to_pcm16(streamed(pieces, seed=11))
    assert len(unbounded) > len(audio) and done["usage"]["output_tokens"] > 20
    c.close()
    wait_idle(client)


# ---- the twilio protocol: Twilio media-stream messages ----------------------------------------

SID = "MZ0123456789abcdef"


def twilio_session(ws_url, seed, **kw):
    c = Conn(ws_url)
    c.send(type="session", voice="alloy", seed=seed, protocol="twilio", stream_sid=SID, **kw)
    ev = c.recv()
    assert ev["type"] == "session" and ev["protocol"] == "twilio", ev
    assert (ev["response_format"], ev["sample_rate"], ev["binary"]) == ("mulaw", 8000, False)
    return c


def twilio_stream(c, end=("done",), timeout=120):
    """Messages up to the utterance's done / cancelled: [(message, mu-law bytes before it)], the
    media payloads, the last message. Every Twilio-shaped message carries the session's sid."""
    out, frames, n = [], [], 0
    while True:
        m = c.recv(timeout)
        assert isinstance(m, dict), "twilio: everything in JSON text frames"
        if "event" in m:
            assert "type" not in m and m["streamSid"] == SID, m
            if m["event"] == "media":
                assert set(m) == {"event", "streamSid", "media"} and set(m["media"]) == {"payload"}
                b = base64.b64decode(m["media"]["payload"])
                frames.append(b)
                n += len(b)
            out.append((m, n))
            continue
        assert m["type"] != "error", m
        out.append((m, n))
        if m["type"] in end:
            return out, frames, m


def test_twilio_media_frames_and_marks(ws_url, streamed, piece_marks):
    """Twilio mode: media events of 20 ms (160 bytes of mu-law) whose payloads joined are the
    in-process 8 kHz audio in mu-law; a frame is cut short only right before a mark or at the end;
    a Twilio mark sent between two sentences comes back where the next sentence's speech can
    start (its library mark), one sent after the last text at the end of the audio."""
    from cosyvoice.server.encoders import encode_raw
    # (long enough that the text after the first mark is not all fed with the voice's prompt
    # speech, before any speech token: then its mark would be 0)
    a = pieces_of("Sure! The train leaves at nine tomorrow morning from the main station, "
                  "platform four, and it arrives in the afternoon. Bring a coat, it will be "
                  "cold.", 6)
    b = pieces_of(" Then it stops twice.", 6)
    c = twilio_session(ws_url, 13)
    for p in a:
        c.send(type="text", text=p)
    c.send(event="mark", streamSid=SID, mark={"name": "after-first"})
    for p in b:
        c.send(type="text", text=p)
    c.send(event="mark", mark={"name": "all-text"})   # (streamSid may be left out)
    c.send(type="end")
    out, frames, done = twilio_stream(c)
    audio = b"".join(frames)
    want = streamed(a + b, seed=13, sample_rate=8000)
    assert audio == encode_raw("mulaw", want) and done["samples"] == len(audio)
    # frames: 160 bytes, except the last before a mark (Twilio's or a piece's) or the end
    kinds = [m.get("event") or m["type"] for m, _ in out]
    for i, (m, _) in enumerate(out):
        if m.get("event") == "media":
            size = len(base64.b64decode(m["media"]["payload"]))
            assert 0 < size <= 160
            if size < 160:
                assert kinds[i + 1] in ("mark", "done"), kinds[i:i + 2]
    assert sum(len(f) == 160 for f in frames) >= len(frames) - 6
    # the Twilio marks, in the output as Twilio takes them
    tw = [(m, n) for m, n in out if m.get("event") == "mark"]
    assert [m["mark"] for m, _ in tw] == [{"name": "after-first"}, {"name": "all-text"}]
    at = piece_marks(a + b, seed=13, sample_rate=8000)
    assert tw[0][1] == at[len(a)] and 0 < tw[0][1] < len(audio)
    assert tw[1][1] == len(audio)
    # the pieces' own mark events too
    marks = [m for m, _ in out if m.get("type") == "mark"]
    assert [m["sample"] for m in marks] == at
    # a mark with nothing in flight comes back at once
    c.send(event="mark", streamSid=SID, mark={"name": "idle"})
    assert c.recv() == {"event": "mark", "streamSid": SID, "mark": {"name": "idle"}}
    # 50 ms frames
    c.send(type="session", frame_ms=50)
    assert c.recv()["frame_ms"] == 50
    c.send(type="text", text="Hello.")
    c.send(type="end")
    out, frames, done = twilio_stream(c)
    assert all(len(f) == 400 for f in frames[:-1]) and 0 < len(frames[-1]) <= 400
    c.close()


def test_twilio_clear_is_a_barge_in(ws_url, client):
    """An incoming clear cancels the utterance (no media of it after the clear event), puts a
    clear event in the output for Twilio's buffer, and the cancelled event says what was sent
    and which Twilio marks were never placed."""
    wait_idle(client)
    c = twilio_session(ws_url, 14)
    for p in pieces_of(LONG_TEXT, 40):
        c.send(type="text", text=p)
    c.send(event="mark", streamSid=SID, mark={"name": "never"})   # after all of the text
    c.send(type="end")
    n = 0
    while n < 8000:   # a second of audio, then barge in
        m = c.recv(120)
        if m.get("event") == "media":
            n += len(base64.b64decode(m["media"]["payload"]))
    c.send(event="clear", streamSid=SID)
    seen_clear = False
    while True:
        m = c.recv(30)
        if m.get("event") == "media":
            assert not seen_clear, "media after the clear event"
            n += len(base64.b64decode(m["media"]["payload"]))
        elif m.get("event") == "clear":
            seen_clear = True
        elif m.get("type") == "cancelled":
            break
    assert seen_clear and m["samples"] == n and m["dropped_marks"] == ["never"]
    # the session goes on
    c.send(type="text", text="Sorry, go on.")
    c.send(type="end")
    out, frames, done = twilio_stream(c)
    assert frames and done["samples"] == sum(len(f) for f in frames)
    c.close()
    wait_idle(client)


def test_twilio_bad_messages(ws_url):
    c = Conn(ws_url)

    def err(code, param):
        m = c.recv()
        assert m["type"] == "error" and m["error"]["code"] == code and \
            m["error"]["param"] == param, m

    c.send(event="mark", streamSid=SID, mark={"name": "x"})   # not a twilio session
    err("invalid_message", "event")
    c.send(type="session", voice="alloy", protocol="twilio")
    err("missing", "stream_sid")
    c.send(type="session", voice="alloy", protocol="sip", stream_sid=SID)
    err("invalid_value", "protocol")
    c.send(type="session", voice="alloy", protocol="twilio", stream_sid=SID, sample_rate=16000)
    err("invalid_value", "sample_rate")
    c.send(type="session", voice="alloy", protocol="twilio", stream_sid=SID, frame_ms=10)
    err("invalid_value", "frame_ms")
    c.send(type="session", voice="alloy", protocol="twilio", stream_sid=SID)
    assert c.recv()["type"] == "session"
    c.send(type="session", response_format="pcm")
    err("invalid_value", "response_format")
    c.send(event="mark", streamSid="MZother", mark={"name": "x"})
    err("invalid_value", "streamSid")
    c.send(event="mark", streamSid=SID, mark={})
    err("invalid_type", "mark.name")
    c.send(event="media", streamSid=SID, media={"payload": ""})   # Twilio's inbound audio
    err("invalid_message", "type")
    c.close()
