"""Engine, voices and requests with the small test model: blocking == streamed audio, cancel,
GIL-free waits, the async reader, stats, voice files and typed errors."""
import asyncio
import os
import threading
import time

import numpy as np
import pytest

import cosyvoice
from cosy_test_support import TEXT, fe_test_model, make_voice

LONG = dict(seed=9, min_tokens=400, max_tokens=400)   # about 16 s of audio in several chunks


def wait_idle(engine, timeout=30.0):
    """The engine's active and queued counts once both are 0 (fails after timeout)."""
    t0 = time.monotonic()
    while True:
        s = engine.stats()
        if s.active == 0 and s.queued == 0:
            return s
        assert time.monotonic() - t0 < timeout, f"engine not idle: {s}"
        time.sleep(0.01)


def test_blocking_equals_streaming(engine, voice):
    p = cosyvoice.make_params(seed=1234, min_tokens=150, max_tokens=150)
    blk = engine.synthesize(voice, TEXT, p)
    assert blk.dtype == np.float32 and blk.ndim == 1 and blk.size > 0
    assert np.all(np.isfinite(blk)) and np.max(np.abs(blk)) <= 1.0
    with engine.submit(voice, TEXT, p) as r:
        chunks = list(r)
        r.wait(0)
        s = r.stats()
    assert len(chunks) >= 2, len(chunks)
    assert all(c.dtype == np.float32 for c in chunks)
    assert np.array_equal(np.concatenate(chunks), blk)
    assert s.done == 1 and s.n_samples == blk.size and s.n_speech_tokens == 150
    assert np.array_equal(np.concatenate(list(engine.stream(voice, TEXT, p))), blk)
    small = list(engine.submit(voice, TEXT, p).chunks())
    assert np.array_equal(np.concatenate(small), blk)


def test_text_stream_pieces_give_the_same_audio(engine, voice):
    text = "The quick brown fox jumps over the lazy dog. It was late again!"
    p = cosyvoice.make_params(seed=21, max_tokens=200, text_normalization=False)

    def slow_words():
        for i, w in enumerate(text.split(" ")):
            time.sleep(0.005)
            yield w if i == 0 else " " + w

    one = np.concatenate(list(engine.stream_text(voice, [text], p)))
    words = np.concatenate(list(engine.stream_text(voice, slow_words(), p)))
    chars = np.concatenate(list(engine.stream_text(voice, iter(text), p)))
    assert one.size > 0 and np.array_equal(one, words) and np.array_equal(one, chars)
    with engine.submit_text_stream(voice, p) as r:
        r.push_text("Hello")
        with pytest.raises(cosyvoice.CosyError):
            r.push_text(b" caf\xff")   # not UTF-8: refused, the request goes on
        r.push_text(b" caf\xc3")       # a character cut between two pushes is fine
        r.push_text(b"\xa9.")
        r.end_text()
        with pytest.raises(cosyvoice.CosyError):
            r.push_text("late")
        assert np.concatenate(list(r)).size > 0


def test_text_marks(engine, voice):
    """Request.text_marks: one mark a word (no normalization), contiguous UTF-8 byte ranges over
    the pushed text, the same marks for any cut into pieces, samples at the output rate."""
    text = "The quick brown fox jumps over the lazy dog. Café au lait, please!"
    raw = text.encode()

    def run(pieces, **kw):
        p = cosyvoice.make_params(seed=21, max_tokens=200, text_normalization=False, **kw)
        with engine.submit_text_stream(voice, p) as r:
            seen = []
            for piece in pieces:
                r.push_text(piece)
                seen = r.text_marks()
            r.end_text()
            n = sum(c.size for c in r)
            marks = r.text_marks()
            assert r.text_marks(len(marks)) == [] and r.text_marks(2) == marks[2:]
            for a, b in zip(seen, marks):    # known then: the same now
                assert (a.text_begin, a.text_end) == (b.text_begin, b.text_end)
                assert a.sample in (-1, b.sample)
        return marks, n

    one, n = run([text])
    words = [w if i == 0 else " " + w for i, w in enumerate(text.split(" "))]
    assert run(words)[0] == one
    assert run(list(text))[0] == one
    assert len(one) >= len(words)          # a word, or a word and its punctuation
    assert one[0].text_begin == 0 and one[-1].text_end == len(raw)
    for a, b in zip(one, one[1:]):
        assert a.text_end == b.text_begin and a.text_token < b.text_token
        assert 0 <= a.sample <= b.sample <= n
    assert raw[one[1].text_begin:one[1].text_end] == b" quick"
    for m in one:
        assert m.sample == m.speech_token * 960
    low, n16 = run([text], sample_rate=16000)
    assert [m.speech_token for m in low] == [m.speech_token for m in one]
    assert all(m.sample == m.speech_token * 640 for m in low) and n16 < n
    # a whole-text request: one mark, its whole text at sample 0
    with engine.submit(voice, "Hello there.", cosyvoice.make_params(seed=1, max_tokens=20)) as r:
        (m,) = r.text_marks()
        assert (m.text_begin, m.text_end, m.sample) == (0, len("Hello there."), 0)
        r.wait()
    with pytest.raises(ValueError):
        r.text_marks()


def test_read_respects_max_samples(engine, voice):
    with engine.submit(voice, "Hello there.", seed=3) as r:
        got = []
        while True:
            c = r.read(1000)
            if c.size == 0:
                break
            assert c.size <= 1000
            got.append(c)
    assert np.array_equal(np.concatenate(got), engine.synthesize(voice, "Hello there.", seed=3))
    with pytest.raises(ValueError):
        r.read(0)   # closed or not, a bad size is refused first


def test_keywords_and_params_are_exclusive(engine, voice):
    with pytest.raises(TypeError):
        engine.synthesize(voice, TEXT, cosyvoice.make_params(), seed=1)


def test_sample_rate_and_speed(engine, voice):
    a = engine.synthesize(voice, "Hello there.", seed=3, sample_rate=16000)
    b = engine.synthesize(voice, "Hello there.", seed=3)
    assert abs(a.size / 16000 - b.size / 24000) < 0.01
    slow = engine.synthesize(voice, "Hello there.", seed=3, speed=0.5)
    assert slow.size > 1.5 * b.size
    # a request at speed != 1 gets the same audio as one chunk at the end (cancellable meanwhile)
    with engine.submit(voice, "Hello there.", seed=3, speed=0.5) as r:
        chunks = list(r)
    assert len(chunks) == 1 and np.array_equal(chunks[0], slow)


def test_errors_are_typed(engine, voice):
    with pytest.raises(cosyvoice.IOError_) as ei:
        engine.load_voice("/nonexistent/voice.gguf")
    assert "/nonexistent/voice.gguf" in ei.value.message and isinstance(ei.value, OSError)
    with pytest.raises(cosyvoice.InvalidArgument) as ei:
        engine.synthesize(voice, TEXT, top_k=100000)
    assert ei.value.status == cosyvoice.ERR_INVALID_ARG and "top_k" in ei.value.message
    with pytest.raises(cosyvoice.TextError) as ei:
        engine.synthesize(voice, b"bad \xff utf-8")
    assert "UTF-8" in ei.value.message


def test_cancel_from_another_thread(engine, voice):
    r = engine.submit(voice, TEXT, **LONG)
    first = r.read()
    assert first.size > 0
    timer = threading.Timer(0.05, r.cancel)   # while this thread is blocked in read
    timer.start()
    with pytest.raises(cosyvoice.Cancelled):
        for _ in r:
            pass
    with pytest.raises(cosyvoice.Cancelled):
        r.wait()
    s = r.stats()
    r.cancel()   # idempotent
    r.close()
    r.close()
    assert s.n_samples < 400 * 960, s.n_samples   # 400 tokens = 384000 samples
    wait_idle(engine)


def test_waiting_does_not_hold_the_gil(engine, voice):
    """While one thread waits in cosy_request_read, another Python thread runs."""
    with engine.submit(voice, TEXT, **LONG) as r:
        r.read()                       # the first chunk; the next one takes a while
        state = {}
        inside = threading.Event()

        def reader():
            inside.set()
            r.read()
            state["read_end"] = time.monotonic()

        t = threading.Thread(target=reader)
        t.start()
        inside.wait()
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 0.03:
            n += 1
        loop_end = time.monotonic()
        t.join()
        r.cancel()
    assert n > 1000, n
    assert loop_end < state["read_end"], "the main thread ran only after the read returned"


def test_async_chunks_equal_blocking(engine, voice):
    p = cosyvoice.make_params(seed=77, min_tokens=120, max_tokens=120)
    blk = engine.synthesize(voice, TEXT, p)

    async def collect():
        ticks = 0
        out = []

        async def ticker():          # the event loop keeps running while chunks are awaited
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        tk = asyncio.ensure_future(ticker())
        async for c in engine.astream(voice, TEXT, p):
            out.append(c)
        tk.cancel()
        return out, ticks

    chunks, ticks = asyncio.run(collect())
    assert np.array_equal(np.concatenate(chunks), blk)
    assert ticks > 5, ticks


def test_async_consumer_leaving_early_cancels_and_releases(engine, voice):
    done0 = engine.stats().requests_done
    holder = {}

    async def first_only():
        r = engine.submit(voice, TEXT, **LONG)
        holder["r"] = r
        agen = r.achunks()
        c = await agen.__anext__()
        await agen.aclose()          # the consumer leaves (as a disconnected client does)
        r.close_when_idle()
        return c

    c = asyncio.run(first_only())
    assert c.size > 0
    s = wait_idle(engine)
    assert s.requests_done >= done0 + 1
    t0 = time.monotonic()
    while holder["r"]._h is not None:   # released by its reader thread after the cancel
        assert time.monotonic() - t0 < 30, "the abandoned request was never released"
        time.sleep(0.01)

    async def task_cancelled():
        async def consume():
            async for _ in engine.astream(voice, TEXT, **LONG):
                await asyncio.sleep(0)
        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    done1 = engine.stats().requests_done
    asyncio.run(task_cancelled())
    s = wait_idle(engine)
    assert s.requests_done >= done1 + 1


def test_engine_stats(engine, voice):
    before = engine.stats()
    engine.synthesize(voice, "Hello there.", seed=3)
    after = engine.stats()
    assert isinstance(after, cosyvoice.EngineStats)
    assert after.requests_done == before.requests_done + 1
    assert after.audio_samples_out > before.audio_samples_out
    assert after.weights_bytes > 0 and after.device_bytes_total == 0   # CPU engine
    assert engine.sample_rate == 24000


def test_engine_info(engine):
    i = engine.info()
    assert i["backend"] == "cpu" and i["device"] == -1 and i["device_name"] == "CPU"
    assert i["max_active"] == 4 and i["max_queued"] == 1024    # the fixture's and the default
    assert i["sample_rate"] == 24000 and i["cpu_threads"] >= 1
    assert i["first_chunk_wait_max"] == -1 and i["gpu_profile"] == ""
    assert i["kv_pages_total"] == 0 and i["gpu_memory_budget"] == 0


def test_voice_save_load_roundtrip(engine, tmp_path):
    p = cosyvoice.make_params(seed=77, max_tokens=60)
    with make_voice(engine, seed=11) as made:
        a = engine.synthesize(made, "Hello there.", p)
        made.save(tmp_path / "v.gguf")
    with engine.load_voice(tmp_path / "v.gguf") as back:
        b = engine.synthesize(back, "Hello there.", p)
    assert a.size > 0 and np.array_equal(a, b)
    with make_voice(engine, seed=12) as other:
        assert not np.array_equal(engine.synthesize(other, "Hello there.", p), a)
    with pytest.raises(cosyvoice.InvalidArgument, match="192"):
        tokens = np.zeros(50, dtype=np.int64)
        engine.voice_from_features(tokens, np.zeros((100, 80), "f"), np.zeros(10, "f"))
    with pytest.raises(ValueError, match="80"):
        engine.voice_from_features([1, 2], np.zeros((4, 81), "f"), np.zeros(192, "f"))
    (tmp_path / "bad.gguf").write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(cosyvoice.CosyError) as ei:
        engine.load_voice(tmp_path / "bad.gguf")
    assert ei.value.status in (cosyvoice.ERR_MODEL_FORMAT, cosyvoice.ERR_MODEL_VERSION)


def test_voice_from_audio(tmp_path):
    model = fe_test_model()
    if not model:
        pytest.skip("no front-end test model (`make build/test/small-fe-f32.gguf`)")
    rate = 22050
    rng = np.random.default_rng(9)
    t = np.arange(rate * 3) / rate
    speech = (0.3 * np.sin(2 * np.pi * 150 * t) * (1 + 0.5 * np.sin(2 * np.pi * 5 * t)) +
              0.02 * rng.standard_normal(t.size)).astype(np.float32)
    with cosyvoice.Engine(model) as eng:
        p = cosyvoice.make_params(seed=5, max_tokens=40)
        cosyvoice.write_wav(tmp_path / "prompt.wav", speech, rate)
        with eng.voice_from_wav(tmp_path / "prompt.wav", "A made up prompt.") as made:
            a = eng.synthesize(made, "Hello there.", p)
            made.save(tmp_path / "cloned.gguf")
        with eng.load_voice(tmp_path / "cloned.gguf") as back:
            assert np.array_equal(eng.synthesize(back, "Hello there.", p), a)
        with pytest.raises(cosyvoice.InvalidArgument, match="silent"):
            eng.voice_from_audio(np.zeros(rate, "f"), rate)
        with pytest.raises(ValueError, match="mono"):
            eng.voice_from_audio(np.zeros((rate, 2), "f"), rate)


def test_voice_from_audio_unsupported_without_frontend(engine):
    speech = (0.3 * np.sin(np.arange(24000 * 2) / 20.0)).astype(np.float32)
    with pytest.raises(cosyvoice.Unsupported):
        engine.voice_from_audio(speech, 24000, "text")


def test_closed_objects_refuse_use(model_path):
    eng = cosyvoice.Engine(model_path)
    v = make_voice(eng)
    eng.close()
    with pytest.raises(ValueError, match="closed"):
        eng.stats()
    with pytest.raises(ValueError, match="closed"):
        v.save(os.devnull)   # the engine released it first
    eng.close()   # idempotent
