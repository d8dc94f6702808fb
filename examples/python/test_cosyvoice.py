#!/usr/bin/env python3
"""test_cosyvoice.py - plain-assert tests of the ctypes binding (no pytest needed).

    COSY_MODEL=demo.gguf COSY_VOICE=demo-voice.gguf python3 test_cosyvoice.py
    python3 test_cosyvoice.py MODEL.gguf VOICE.gguf

Checks:
  - every symbol of abi/cosyvoice.symbols has argtypes and restype declared;
  - the ctypes Structures match the installed header field for field (offsets and sizes printed by
    ../c/abi_layout.c, compiled with cc against `pkg-config --cflags cosyvoice`; skipped without cc);
  - errors raise CosyError carrying the status and cosy_last_error()'s message;
and with a model and a voice:
  - blocking synthesis == pull-streamed audio, sample for sample, for one seed (and chunked);
  - cancel from another thread while the main thread is blocked in a read ends the request with
    ERR_CANCELLED early;
  - a voice made from features, saved and loaded back, gives the same audio as the original;
  - a voice cloned from audio (when the model has the front-end models; else ERR_UNSUPPORTED),
    saved and loaded back, gives the same audio; bad audio raises ERR_INVALID_ARG.
"""
import array
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cosyvoice as cv  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog, and the morning train was late again, so "
        "she walked along the river instead.")
RESULTS = []


def test(fn):
    RESULTS.append(fn)
    return fn


@test
def symbols_declared():
    path = os.path.join(HERE, "..", "..", "abi", "cosyvoice.symbols")
    if os.path.exists(path):
        with open(path) as f:
            exported = {line.strip() for line in f if line.strip()}
        missing = exported - set(cv._PROTOS)
        extra = set(cv._PROTOS) - exported
        assert not missing, f"exported but not declared: {sorted(missing)}"
        assert not extra, f"declared but not exported: {sorted(extra)}"
    for name, (res, args) in cv._PROTOS.items():
        fn = getattr(cv.lib, name)
        assert fn.argtypes is not None and list(fn.argtypes) == list(args), name
        assert fn.restype is res or (res is None and fn.restype is None), name
    return f"{len(cv._PROTOS)} functions declared ({cv.lib._name})"


@test
def struct_layout():
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("cc")
    if not cc or not shutil.which("pkg-config"):
        return "SKIP (no cc or pkg-config)"
    cflags = subprocess.run(["pkg-config", "--cflags", "cosyvoice"], capture_output=True,
                            text=True, check=True).stdout.split()
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "abi_layout")
        subprocess.run([cc, "-std=c11", os.path.join(HERE, "..", "c", "abi_layout.c"), *cflags,
                        "-o", exe], check=True)
        lines = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split("\n")
    n = 0
    for line in lines:
        w = line.split()
        if not w:
            continue
        st = cv.STRUCTS[w[1]]
        if w[0] == "struct":
            assert cv.ctypes.sizeof(st) == int(w[2]), f"{w[1]}: ctypes {cv.ctypes.sizeof(st)} != C {w[2]}"
        else:
            field = getattr(st, w[2])
            assert (field.offset, field.size) == (int(w[3]), int(w[4])), \
                f"{w[1]}.{w[2]}: ctypes offset/size {field.offset}/{field.size} != C {w[3]}/{w[4]}"
            n += 1
    # every ctypes field was checked (the C list and the mirror agree on the field set)
    assert n == sum(len(s._fields_) for s in cv.STRUCTS.values()), n
    return f"{len(cv.STRUCTS)} structs, {n} fields match the C compiler's layout"


@test
def init_sets_struct_size():
    p = cv.make_params(seed=3)
    assert p.struct_size == cv.ctypes.sizeof(cv.SynthParams) and p.seed == 3
    f = cv.VoiceFeatures()
    cv.lib.cosy_voice_features_init(cv.byref(f), cv.ctypes.sizeof(f))
    assert f.struct_size == cv.ctypes.sizeof(cv.VoiceFeatures) and f.speaker_dim == 192
    num, s = cv.version()
    assert num == 100 * int(s.split(".")[1]) + 10000 * int(s.split(".")[0]) + \
        int(s.split(".")[2].split()[0]), (num, s)
    return f"version {s}"


@test
def errors_raise():
    try:
        cv.Engine("/nonexistent/model.gguf")
        raise AssertionError("no exception")
    except cv.CosyError as e:
        assert e.status == cv.ERR_IO, e
        assert "/nonexistent/model.gguf" in e.message, e.message
        assert "cosy_engine_create" in str(e)
    try:
        cv.audio_to_mel([0.0] * 100, 1000)   # rate out of range
        raise AssertionError("no exception")
    except cv.CosyError as e:
        assert e.status == cv.ERR_INVALID_ARG and e.message, e
    assert cv.status_str(cv.ERR_CANCELLED) == "cancelled", cv.status_str(cv.ERR_CANCELLED)
    return "ok"


@test
def read_wav_formats():
    """read_wav: 16-bit PCM stereo (mixed by the mean) and 32-bit float (WAVE_FORMAT_IEEE_FLOAT,
    as audio/zero_shot_prompt.wav) give the samples written; 8-bit is refused by name."""
    import struct
    vals = [0.5, -0.25, 0.125, 0.0, -1.0]

    def riff(tag, ch, rate, bits, payload):
        fmt = struct.pack("<HHIIHH", tag, ch, rate, rate * ch * bits // 8, ch * bits // 8, bits)
        return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(payload)) + b"WAVE" +
                b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" +
                struct.pack("<I", len(payload)) + payload)
    with tempfile.TemporaryDirectory() as d:
        p16, p32, p8 = (os.path.join(d, n) for n in ("a.wav", "b.wav", "c.wav"))
        with open(p16, "wb") as f:   # left = v, right = v / 2 -> mean 0.75 v
            f.write(riff(1, 2, 22050, 16, b"".join(struct.pack("<hh", int(v * 32768 // 1),
                                                               int(v * 16384 // 1)) for v in vals)))
        with open(p32, "wb") as f:
            f.write(riff(3, 1, 24000, 32, struct.pack(f"<{len(vals)}f", *vals)))
        with open(p8, "wb") as f:
            f.write(riff(1, 1, 8000, 8, bytes(5)))
        a, ra = cv.read_wav(p16)
        b, rb = cv.read_wav(p32)
        assert (ra, rb) == (22050, 24000), (ra, rb)
        assert list(a) == [0.75 * v for v in vals], list(a)
        assert list(b) == vals, list(b)
        try:
            cv.read_wav(p8)
            raise AssertionError("no exception")
        except ValueError as e:
            assert "8-bit" in str(e), e
    return "16-bit stereo and 32-bit float read; 8-bit refused"


def with_model(fn):
    def run():
        model = os.environ.get("COSY_MODEL") or (sys.argv[1] if len(sys.argv) > 1 else None)
        voice = os.environ.get("COSY_VOICE") or (sys.argv[2] if len(sys.argv) > 2 else None)
        if not model or not voice or not os.path.exists(model) or not os.path.exists(voice):
            return "SKIP (set COSY_MODEL and COSY_VOICE)"
        with cv.Engine(model, max_active=2) as eng, eng.load_voice(voice) as v:
            return fn(eng, v)
    run.__name__ = fn.__name__
    return test(run)


@with_model
def model_errors(eng, v):
    try:
        eng.load_voice("/nonexistent/voice.gguf")
        raise AssertionError("no exception")
    except cv.CosyError as e:
        assert e.status == cv.ERR_IO and "/nonexistent/voice.gguf" in e.message, e
    try:
        eng.synthesize(v, TEXT, top_k=100000)
        raise AssertionError("no exception")
    except cv.CosyError as e:
        assert e.status == cv.ERR_INVALID_ARG and "top_k" in e.message, e
    try:
        eng.synthesize(v, b"bad \xff utf-8")
        raise AssertionError("no exception")
    except cv.CosyError as e:
        assert e.status == cv.ERR_TEXT and "UTF-8" in e.message, e
    return "ok"


@with_model
def blocking_equals_pulled(eng, v):
    p = cv.make_params(seed=1234, max_tokens=120)
    t0 = time.monotonic()
    blk = eng.synthesize(v, TEXT, p)
    t_blk = time.monotonic() - t0
    assert len(blk) > 0 and all(math.isfinite(x) and abs(x) <= 1.0 for x in blk)
    with eng.submit(v, TEXT, p) as r:
        got = array.array("f")
        reads = 0
        for c in r.chunks(997):
            got.extend(c)
            reads += 1
        r.wait(0)
        s = r.stats()
    assert got == blk, f"pulled {len(got)} samples != blocking {len(blk)} (or values differ)"
    assert s.done == 1 and s.n_samples == len(blk) and s.n_chunks >= 2, (s.n_samples, s.n_chunks)
    streamed = array.array("f")
    for c in eng.stream(v, TEXT, p):   # generator form
        streamed.extend(c)
    assert streamed == blk
    st = eng.stats()
    assert st.requests_done >= 3 and st.audio_samples_out >= 3 * len(blk), st.requests_done
    return (f"{len(blk)} samples, identical blocking/pulled/generator ({reads} reads, "
            f"{s.n_chunks} engine chunks, ttfb {s.ttfb_s:.3f} s, blocking {t_blk:.3f} s)")


@with_model
def cancel_from_thread(eng, v):
    p = cv.make_params(seed=9, max_tokens=600, min_tokens=600)   # forced to be long
    r = eng.submit(v, TEXT, p)
    first = r.read(256)
    assert len(first) > 0
    timer = threading.Timer(0.05, r.cancel)   # cancel while this thread is blocked in read
    t0 = time.monotonic()
    timer.start()
    try:
        for _ in r.chunks(256):
            pass
        raise AssertionError("the request was not cancelled")
    except cv.CosyError as e:
        assert e.status == cv.ERR_CANCELLED, e
    dt = time.monotonic() - t0
    try:
        r.wait()
        raise AssertionError("wait after cancel did not raise")
    except cv.CosyError as e:
        assert e.status == cv.ERR_CANCELLED
    s = r.stats()
    r.cancel()   # idempotent
    r.close()
    r.close()
    # the LLM may run ahead of the audio; the cancel must stop the audio (600 tokens = 576000
    # samples at 24 kHz)
    assert s.n_samples < 600 * 960, s.n_samples
    return (f"cancelled after {dt:.3f} s: {s.n_samples} of 576000 samples, "
            f"{s.n_speech_tokens} of 600 tokens")


@with_model
def voice_features_roundtrip(eng, v):
    rng = random.Random(5)
    rate = 24000
    tone = [0.3 * math.sin(2 * math.pi * 180 * i / rate) * (1 + 0.2 * math.sin(i / 900))
            for i in range(rate * 2)]
    mel, frames = cv.audio_to_mel(tone, rate)
    assert frames > 90 and len(mel) == frames * 80
    tokens = [rng.randrange(6561) for _ in range(frames // 2)]
    spk = [rng.gauss(0, 1) for _ in range(192)]
    p = cv.make_params(seed=77, max_tokens=60)
    with eng.voice_from_features(speech_tokens=tokens, mel=mel, speaker_embedding=spk,
                                 prompt_text="A made up prompt.<|endofprompt|>") as made:
        a = eng.synthesize(made, "Hello there.", p)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "made.voice.gguf")
            made.save(path)
            with eng.load_voice(path) as back:
                b = eng.synthesize(back, "Hello there.", p)
    assert len(a) > 0 and a == b
    try:
        eng.voice_from_features(speech_tokens=tokens, mel=mel, speaker_embedding=spk[:10])
        raise AssertionError("no exception")
    except cv.CosyError as e:
        assert e.status == cv.ERR_INVALID_ARG and "192" in e.message, e
    return f"{frames} mel frames, {len(tokens)} tokens; saved+loaded voice gives identical audio"


@with_model
def voice_from_audio(eng, v):
    rate = 22050
    rng = random.Random(9)
    speech = [0.3 * math.sin(2 * math.pi * 150 * i / rate) * (1 + 0.5 * math.sin(i / 700)) +
              0.02 * rng.gauss(0, 1) for i in range(rate * 3)]
    try:
        made = eng.voice_from_audio(speech, rate, "A made up prompt.<|endofprompt|>")
    except cv.CosyError as e:
        assert e.status == cv.ERR_UNSUPPORTED and "front" not in e.where, e
        return f"SKIP-like: the model has no front-end models ({e.message[:60]}...)"
    p = cv.make_params(seed=5, max_tokens=40)
    with made:
        a = eng.synthesize(made, "Hello there.", p)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "cloned.voice.gguf")
            made.save(path)
            with eng.load_voice(path) as back:
                b = eng.synthesize(back, "Hello there.", p)
    assert len(a) > 0 and a == b
    for bad, what in (([0.0] * rate, "silent"), (speech[:rate // 4], "0.5 s"),
                      ([x * 32768 for x in speech], "scaled")):
        try:
            eng.voice_from_audio(bad, rate)
            raise AssertionError("no exception")
        except cv.CosyError as e:
            assert e.status == cv.ERR_INVALID_ARG and what in e.message, e
    return "cloned from 3 s at 22.05 kHz; saved+loaded voice gives identical audio; bad audio refused"


def main():
    failed = 0
    for fn in RESULTS:
        try:
            msg = fn()
            print(f"[ OK ] {fn.__name__}: {msg}")
        except Exception as e:   # noqa: BLE001 - report and go on
            failed += 1
            print(f"[FAIL] {fn.__name__}: {type(e).__name__}: {e}")
    print(f"{len(RESULTS) - failed}/{len(RESULTS)} passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
