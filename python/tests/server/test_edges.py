"""Hostile and careless clients against a real server over loopback (raw sockets where httpx would
hide what happens): a client that leaves while its request waits in the engine's queue, before
its first audio or in the middle of the stream is let go by the server within 1 s (its engine
request cancelled: a queued one is gone at once, a running one at the end of the engine call that
runs, with no call after it); slow clients are answered 408 and disconnected; oversize bodies
413; NUL, over-long strings, malformed JSON and empty bodies 400 with a message that says what
is wrong; a WebSocket session's utterances in flight are bounded. Each case is bounded: no test
waits more than a few seconds past the limit it checks."""
import json
import os
import select
import socket
import time

import httpx
import pytest

from server_support import start_server, stop_server

TEXT = "Hello there, this is the speech server speaking."
LONG = {"min_tokens": 400, "max_tokens": 400}   # about 16 s of audio; tens of seconds on the CPU
READ_TIMEOUT = 1.0
MAX_BODY = 65536
MAX_UPLOAD = 131072   # a speech request with a reference recording (test_reference.py)
MAX_INSTRUCTIONS = 200


@pytest.fixture(scope="module")
def edges(model_path, voices_dir):
    """(base URL, port) of a server with small limits: read timeout 1 s, 64 KiB bodies, 200
    characters of instructions, 2 active requests and 2 queued."""
    proc, url, log = start_server(
        model_path, os.path.dirname(voices_dir), "--voices", voices_dir, "--max-active", "2",
        "--max-queued", "2", "--read-timeout", str(READ_TIMEOUT), "--max-body-bytes",
        str(MAX_BODY), "--max-upload-bytes", str(MAX_UPLOAD), "--max-instructions-chars",
        str(MAX_INSTRUCTIONS))
    yield url, int(url.rsplit(":", 1)[1])
    stop_server(proc, log)


@pytest.fixture(scope="module")
def ec(edges):
    with httpx.Client(base_url=edges[0], timeout=60) as c:
        yield c


def health(c):
    return c.get("/health").json()


def wait_until(c, pred, limit, what):
    """Poll /health until pred(health) holds; the seconds it took (fails after limit)."""
    t0 = time.monotonic()
    while True:
        h = health(c)
        if pred(h):
            return time.monotonic() - t0
        assert time.monotonic() - t0 < limit, f"{what}: still {h} after {limit} s"
        time.sleep(0.02)


def idle(h):
    return h["active"] == 0 and h["queued"] == 0 and h["requests_in_progress"] == 0


def raw_request(port, body=None, raw=None, head_extra=b""):
    """A socket that has sent POST /v1/audio/speech with body (a dict, or raw bytes)."""
    data = raw if raw is not None else json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
              + head_extra + b"Content-Length: %d\r\n\r\n" % len(data) + data)
    return s


def speech_body(**kw):
    body = {"model": "cosyvoice3", "voice": "alloy", "input": TEXT, "response_format": "pcm",
            "seed": 5}
    body.update(kw)
    return body


def readable(s, timeout=0.0):
    return bool(select.select([s], [], [], timeout)[0])


def read_response(s, timeout=10):
    """Everything the server sends until it closes (or timeout)."""
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (socket.timeout, ConnectionResetError):
        pass
    return out


def json_of(response_bytes):
    head, _, body = response_bytes.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), json.loads(body)


# ---- clients that leave ------------------------------------------------------------------------

def test_leaving_before_the_first_audio_frees_the_slot(ec, edges):
    wait_until(ec, idle, 30, "idle before the test")
    s = raw_request(edges[1], speech_body(**LONG))
    # the request reaches the engine; the first audio is about a second of CPU work away
    wait_until(ec, lambda h: h["active"] + h["queued"] >= 1, 10, "request admitted")
    assert not readable(s), "the first audio came before the test could leave"
    calls = health(ec)["engine_calls"]
    s.close()
    let_go(ec, calls, "the client left before its first audio")


def test_leaving_while_queued_and_mid_stream_frees_everything(ec, edges):
    """Two long requests fill max_active 2; a third waits in the engine's queue."""
    wait_until(ec, idle, 30, "idle before the test")
    a = raw_request(edges[1], speech_body(seed=11, **LONG))
    b = raw_request(edges[1], speech_body(seed=12, **LONG))
    wait_until(ec, lambda h: h["active"] == 2, 10, "two active")
    q = raw_request(edges[1], speech_body(seed=13, **LONG))
    wait_until(ec, lambda h: h["queued"] == 1, 10, "one queued")
    q.close()   # leaves while queued: no engine call to wait for
    wait_until(ec, lambda h: h["queued"] == 0 and h["active"] == 2 and
               h["requests_in_progress"] == 2, 1.0, "queued request gone")
    # the two active ones stream: read their first bytes, then leave mid-stream
    for s in (a, b):
        assert readable(s, 30)
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
    calls = health(ec)["engine_calls"]
    a.close()
    b.close()
    let_go(ec, calls, "the clients left mid-stream")


def let_go(ec, calls, what):
    """The server lets go of the requests within 1 s; the engine stops them at its next step: a
    flow call (and its vocoder call) that was running ends first, which takes milliseconds on a
    GPU and can take seconds on a loaded 2-core CPU; no further call is made for them."""
    wait_until(ec, lambda h: h["requests_in_progress"] == 0, 1.0, f"server after {what}")
    t = wait_until(ec, idle, 30, f"engine slots after {what}")
    print(f"{what}: engine slots free {t * 1000:.0f} ms later")
    now = health(ec)["engine_calls"]
    assert now["flow"] - calls["flow"] <= 2 and now["vocoder"] - calls["vocoder"] <= 2, (calls, now)


def test_leaving_at_once_leaves_nothing_behind(ec, edges):
    """Connections closed right after the request, at any point of its preparation."""
    wait_until(ec, idle, 30, "idle before the test")
    calls = health(ec)["engine_calls"]
    for delay in (0.0, 0.01, 0.05, 0.2):
        s = raw_request(edges[1], speech_body(**LONG))
        time.sleep(delay)
        s.close()
    time.sleep(0.3)   # the last one may not have reached the server's handler yet
    let_go(ec, calls, "four clients left at once")


# ---- slow clients ------------------------------------------------------------------------------

def test_slow_request_head_is_timed_out(edges):
    s = socket.create_connection(("127.0.0.1", edges[1]), timeout=10)
    t0 = time.monotonic()
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\n")
    got = b""
    while time.monotonic() - t0 < READ_TIMEOUT + 5:
        if readable(s, 0.2):   # one header byte every 0.2 s until the server answers
            got = read_response(s)
            break
        s.sendall(b"X")
    took = time.monotonic() - t0
    s.close()
    assert got.startswith(b"HTTP/1.1 408"), got[:200]
    status, body = json_of(got)
    assert body["error"]["code"] == "read_timeout"
    assert READ_TIMEOUT - 0.1 < took < READ_TIMEOUT + 2, took


def test_head_parsed_before_the_expiry_is_not_timed_out():
    """The read timeout against a head that has arrived but whose request task has not run yet
    (the event loop runs the data, then the expired timer, then the task: after a stall of the
    loop, as on a loaded machine): no 408. A partial head at expiry still gets one."""
    import asyncio
    from cosyvoice.server.limits import timed_protocol

    class Base:   # what timed_protocol needs of uvicorn's protocol: a new `cycle` per whole head
        def __init__(self):
            self.cycle = None

        def connection_made(self, transport):
            pass

        def data_received(self, data):
            if data.endswith(b"\r\n\r\n"):
                self.cycle = object()

        def connection_lost(self, exc):
            pass

    class Transport:
        def __init__(self):
            self.out, self.closed = b"", False

        def is_closing(self):
            return self.closed

        def write(self, b):
            self.out += b

        def close(self):
            self.closed = True

    async def run(data):
        p, t = timed_protocol(Base, 0.05)(), Transport()
        p.connection_made(t)
        p.data_received(data)
        await asyncio.sleep(0.2)   # the timer expires; no request task disarms it
        return t

    t = asyncio.run(run(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"))
    assert not t.closed and t.out == b"", t.out
    t = asyncio.run(run(b"GET /health HTTP/1.1\r\nHost"))
    assert t.closed and t.out.startswith(b"HTTP/1.1 408"), t.out


def test_silent_connection_is_closed(edges):
    s = socket.create_connection(("127.0.0.1", edges[1]), timeout=10)
    t0 = time.monotonic()
    assert readable(s, READ_TIMEOUT + 3)
    assert s.recv(100) == b""   # closed without a word: nothing of a request came
    assert time.monotonic() - t0 < READ_TIMEOUT + 2
    s.close()


def test_slow_body_is_timed_out(ec, edges):
    body = json.dumps(speech_body()).encode()
    s = socket.create_connection(("127.0.0.1", edges[1]), timeout=10)
    t0 = time.monotonic()
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
              % len(body) + body[:10])
    got = b""
    for i in range(10, len(body)):
        if readable(s, 0.2):
            got = read_response(s)
            break
        s.sendall(body[i:i + 1])
    took = time.monotonic() - t0
    s.close()
    status, err = json_of(got)
    assert status == "HTTP/1.1 408 Request Timeout", status
    assert err["error"]["code"] == "read_timeout" and "read timeout" in err["error"]["message"]
    assert took < READ_TIMEOUT + 2, took
    wait_until(ec, idle, 5, "nothing left of the slow request")


# ---- sizes, strings, JSON ----------------------------------------------------------------------

def test_oversize_body_is_413_before_it_is_read(edges):
    s = socket.create_connection(("127.0.0.1", edges[1]), timeout=10)
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000000\r\n\r\n")
    status, err = json_of(read_response(s))
    s.close()
    assert status.startswith("HTTP/1.1 413"), status
    assert err["error"]["code"] == "request_too_large" and str(MAX_BODY) in err["error"]["message"]


def test_oversize_chunked_body_is_413(edges):
    # refused the moment it passes the upload limit (the most a reference recording may take) ...
    s = socket.create_connection(("127.0.0.1", edges[1]), timeout=10)
    n = MAX_UPLOAD + 1
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
              + b"%x\r\n" % n + b" " * n)
    status, err = json_of(read_response(s))
    s.close()
    assert status.startswith("HTTP/1.1 413"), status
    assert err["error"]["code"] == "request_too_large"
    # ... and once read when it passes the body limit without carrying a recording
    s = socket.create_connection(("127.0.0.1", edges[1]), timeout=10)
    n = MAX_BODY + 1
    s.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
              + b"%x\r\n" % n + b" " * n + b"\r\n0\r\n\r\n")
    status, err = json_of(read_response(s))
    s.close()
    assert status.startswith("HTTP/1.1 413"), status
    assert err["error"]["code"] == "request_too_large"
    assert "reference recording" in err["error"]["message"]


def err_of(r, status, param, code, text=None):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert e["type"] == "invalid_request_error"
    assert (e["param"], e["code"]) == (param, code), e
    if text is not None:
        assert text in e["message"], e
    return e


@pytest.mark.parametrize("field", ["input", "instructions", "model", "voice"])
def test_nul_is_refused(ec, field):
    body = speech_body()
    body[field] = "abc\u0000def" if field != "voice" else "al\u0000loy"
    err_of(ec.post("/v1/audio/speech", json=body), 400, field, "invalid_text", "NUL")
    body = speech_body(voice={"id": "all\u0000oy"})
    err_of(ec.post("/v1/audio/speech", json=body), 400, "voice", "invalid_text", "NUL")


def test_instructions_that_are_only_nul(ec):
    e = err_of(ec.post("/v1/audio/speech", json=speech_body(instructions="\u0000")), 400,
               "instructions", "invalid_text")
    assert "instruct_text" not in e["message"], e


def test_every_string_has_a_limit(ec):
    err_of(ec.post("/v1/audio/speech", json=speech_body(instructions="x" * (MAX_INSTRUCTIONS + 1))),
           400, "instructions", "string_above_max_length", str(MAX_INSTRUCTIONS))
    err_of(ec.post("/v1/audio/speech", json=speech_body(model="m" * 257)), 400, "model",
           "string_above_max_length", "256")
    err_of(ec.post("/v1/audio/speech", json=speech_body(voice="v" * 257)), 400, "voice",
           "string_above_max_length")
    err_of(ec.post("/v1/audio/speech", json=speech_body(response_format="w" * 33)), 400,
           "response_format", "string_above_max_length")
    err_of(ec.post("/v1/audio/speech", json=speech_body(input="a" * 4097)), 400, "input",
           "string_above_max_length", "4097")


def post_raw(ec, data):
    return ec.post("/v1/audio/speech", content=data, headers={"content-type": "application/json"})


def test_malformed_json_says_where(ec):
    bad = b'{"model": "tts-1", "input": "hi", voice: "alloy"}'
    e = err_of(post_raw(ec, bad), 400, None, "invalid_json", "not valid JSON")
    assert f"line 1 column {bad.index(b'voice') + 1}" in e["message"], e
    err_of(post_raw(ec, b'{"model": "tts-1", "input": "\xff"}'), 400, None, "invalid_json")
    err_of(post_raw(ec, b"[" * 20000), 400, None, "invalid_json")
    err_of(post_raw(ec, b'["model", "input"]'), 400, None, "invalid_json", "JSON object")
    err_of(post_raw(ec, b'{"model": "tts-1", "input": "hi", "voice": "alloy", "speed": NaN}'), 400,
           "speed", "finite_number")


@pytest.mark.parametrize("data", [b"", b"  \r\n "])
def test_empty_body(ec, data):
    err_of(post_raw(ec, data), 400, None, "empty_body", "empty")


def test_missing_and_unknown_fields_name_them(ec):
    err_of(ec.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy"}), 400, "input",
           "missing", "missing required parameter: input")
    err_of(ec.post("/v1/audio/speech", json=speech_body(voices="alloy")), 400, "voices",
           "extra_forbidden", "voices")
    err_of(ec.post("/v1/audio/speech", json=speech_body(voice={"name": "alloy"})), 400, "voice",
           "invalid_voice")
    err_of(ec.post("/v1/audio/speech", json=speech_body(input=5)), 400, "input", "string_type")


def test_still_serving_after_all_that(ec):
    wait_until(ec, idle, 30, "idle")
    r = ec.post("/v1/audio/speech", json=speech_body(max_tokens=30))
    assert r.status_code == 200 and len(r.content) > 0


def test_one_websocket_session_has_at_most_4_utterances_in_flight(edges, ec):
    """(max_active 2 + max_queued 2 here: the engine takes four)"""
    client = pytest.importorskip("websockets.sync.client")
    wait_until(ec, idle, 30, "idle before the test")
    url = edges[0].replace("http://", "ws://") + "/v1/audio/speech/stream"
    with client.connect(url, max_size=None) as ws:
        ws.send(json.dumps({"type": "session", "voice": "alloy", "seed": 1}))
        for i in range(4):
            ws.send(json.dumps({"type": "text", "text": f"Utterance {i}."}))
            ws.send(json.dumps({"type": "end"}))
        ws.send(json.dumps({"type": "text", "text": "One too many."}))
        events = []
        while not any(e["type"] == "error" for e in events):
            m = ws.recv(timeout=60)
            if isinstance(m, str):
                events.append(json.loads(m))
        err = [e for e in events if e["type"] == "error"][0]["error"]
        assert err["code"] == "too_many_utterances", err
        dones = sum(e["type"] == "done" for e in events)
        while dones < 4:
            m = ws.recv(timeout=120)
            dones += isinstance(m, str) and json.loads(m)["type"] == "done"
    wait_until(ec, idle, 30, "idle after the session")
