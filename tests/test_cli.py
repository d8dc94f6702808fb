#!/usr/bin/env python3
"""Tests of the cosyvoice-say program (examples/cli/cosyvoice-say.c).

    COSY_CLI=build/bin/cosyvoice-say COSY_TEST_FE_MODEL=build/test/small-fe-f32.gguf \
        python3 tests/test_cli.py          (`make test-py` runs it; exit status 1 on any failure)

Options are checked before the model is loaded (a wrong one is reported with a model path that
does not exist, so a message about the model would show that the order is wrong), each mistake
gets a message naming it, audio goes to standard output as WAV or raw PCM, and conflicting
options are refused. The synthesis cases use the small golden checkpoint with the small random
front-end models ($COSY_TEST_FE_MODEL, made by the Makefile), cloning a voice from a tone.
"""
import math
import os
import pty
import struct
import subprocess
import sys
import tempfile
import wave

from script_tests import Skip, run_tests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.abspath(os.environ.get("COSY_CLI") or os.path.join(ROOT, "build", "bin", "cosyvoice-say"))
MODEL = os.path.abspath(os.environ.get("COSY_TEST_FE_MODEL")
                        or os.path.join(ROOT, "build", "test", "small-fe-f32.gguf"))
TMP = tempfile.mkdtemp(prefix="cosy-test-cli-")
NO_MODEL = os.path.join(TMP, "no-such-model.gguf")
HINT = "(cosyvoice-say --help lists the options)"



def say(msg):
    print("   " + msg, flush=True)


def run(args, env=None, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL):
    """-> (exit status, stdout bytes, stderr text)."""
    p = subprocess.run([CLI] + args, stdout=stdout, stderr=subprocess.PIPE, stdin=stdin,
                       env=dict(os.environ, **(env or {})), cwd=TMP)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def need_model():
    if not os.path.exists(MODEL):
        raise Skip(f"no test model {MODEL} (make build/test/small-fe-f32.gguf; needs ../shared)")


def tone_wav(path, seconds=2.0, rate=16000):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        n = int(seconds * rate)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 150 * i / rate)
                                                        * (1 + 0.3 * math.sin(2 * math.pi * 2.1 * i / rate))))
                               for i in range(n)))
    return path


_voice = []


def voice():
    """A voice file cloned from a tone with --prompt-wav / --save-voice (made once)."""
    if not _voice:
        need_model()
        wav = tone_wav(os.path.join(TMP, "prompt.wav"))
        v = os.path.join(TMP, "voice.gguf")
        rc, _, se = run(["-m", MODEL, "--prompt-wav", wav, "--prompt-text", "A made up prompt.",
                         "--save-voice", v, "--max-tokens", "10", "-o", os.path.join(TMP, "c.wav"),
                         "Hello."])
        assert rc == 0, se
        assert "voice cloned from" in se, se
        _voice.append(v)
    return _voice[0]


def refused(args, words, status=2):
    """args must fail with status and a last stderr line holding every one of words."""
    rc, so, se = run(args)
    last = se.strip().splitlines()[-1] if se.strip() else ""
    assert rc == status, f"{args}: exit status {rc}, expected {status}: {se}"
    assert "model loaded" not in se, f"{args}: the model was loaded before the refusal: {se}"
    for w in words:
        assert w in last, f"{args}: message {last!r} does not say {w!r}"
    return last


# ------------------------------------------------------------------------------------------------

def test_help_and_version():
    """--help lists every option including --version and --raw; --version prints the library's."""
    rc, so, se = run(["--help"])
    assert rc == 0, se
    h = so.decode()
    for opt in ("--version", "--raw", "-o, --output", "--prompt-text", "--mode", "--speed", "--seed"):
        assert opt in h, f"--help does not list {opt}"
    rc, so, se = run(["--version"])
    assert rc == 0 and so.decode().startswith("0."), (rc, so, se)
    say(f"--version: {so.decode().strip()}")


def test_missing_inputs_named():
    """a missing model, voice or text: exit 2 and a message saying which, not the bare usage."""
    v = os.path.join(TMP, "v.gguf")
    for args, words in (([], ["no model", "-m MODEL"]),
                        (["-m", NO_MODEL, "hi"], ["no voice", "-v VOICE", "--prompt-wav"]),
                        (["-m", NO_MODEL, "-v", v], ["no text", "-f FILE", "standard input"]),
                        (["-m", NO_MODEL, "-v", v, "-f", "t.txt", "hi"], ["two texts"]),
                        (["-m", NO_MODEL, "-v", v, "hi", "there"], ["more than one text", "quote"]),
                        (["-m", NO_MODEL, "-v", v, "--bogus", "hi"], ["unknown option --bogus"]),
                        (["-m", NO_MODEL, "-v"], ["-v needs a value"])):
        msg = refused(args, words + [HINT])
        say(msg)


def test_numbers_checked_before_load():
    """--seed abc, --rate 5, --speed 3, --device x ...: refused by name before the model loads."""
    base = ["-m", NO_MODEL, "-v", os.path.join(TMP, "v.gguf")]
    for opt, val, words in (("--seed", "abc", ["--seed abc", "integer"]),
                            ("--seed", "-1", ["--seed -1"]),
                            ("--seed", "12x", ["--seed 12x"]),
                            ("--rate", "5", ["--rate 5", "8000..48000"]),
                            ("--speed", "3", ["--speed 3", "0.5..2"]),
                            ("--speed", "fast", ["--speed fast"]),
                            ("--max-tokens", "-4", ["--max-tokens -4"]),
                            ("--device", "gpu", ["--device gpu"]),
                            ("--threads", "1.5", ["--threads 1.5"])):
        say(refused(base + [opt, val, "hi"], words))


def test_mode_checked_before_load():
    """--mode foo refused before loading; cross_lingual and cross-lingual are one mode."""
    for bad in ("foo", "crosslingual", "cross-lingual-and-more"):
        say(refused(["-m", NO_MODEL, "-v", os.path.join(TMP, "v.gguf"), "--mode", bad, "hi"],
                    [f"--mode {bad}", "zero-shot, cross-lingual or instruct"]))
    say(refused(["-m", NO_MODEL, "-v", "v.gguf", "--mode", "instruct", "hi"], ["--instruct TEXT"]))
    say(refused(["-m", NO_MODEL, "-v", "v.gguf", "--instruct", "Speak slowly.", "hi"],
                ["--mode instruct"]))
    v = voice()
    outs = []
    for m in ("cross-lingual", "Cross_Lingual", "zero-shot", "zero_shot"):
        rc, so, se = run(["-m", MODEL, "-v", v, "--mode", m, "--max-tokens", "15", "--seed", "4",
                          "-o", "-", "Hello there."])
        assert rc == 0, se
        outs.append(so)
    assert outs[0] == outs[1] and outs[2] == outs[3], "the two spellings of a mode differ"
    assert outs[0] != outs[2], "cross-lingual and zero-shot gave the same audio"
    say("--mode Cross_Lingual == cross-lingual, zero_shot == zero-shot (same bytes)")


def test_voice_options_conflicts():
    """-v with --prompt-wav, --prompt-wav without --prompt-text, ... refused with a message."""
    base = ["-m", NO_MODEL]
    for args, words in ((["-v", "v.gguf", "--prompt-wav", "p.wav"], ["-v v.gguf", "--prompt-wav"]),
                        (["-v", "v.gguf", "--save-voice", "s.gguf"], ["--save-voice"]),
                        (["--prompt-wav", "p.wav"], ["--prompt-wav p.wav needs --prompt-text"]),
                        (["--prompt-text", "words"], ["--prompt-text is the transcript of --prompt-wav"]),
                        (["--speaker", "s.txt", "--prompt-tokens", "t.txt", "--prompt-wav", "p.wav"],
                         ["needs --prompt-text"])):
        say(refused(base + args + ["hi"], words))
    say(refused(base + ["--prompt-wav", "p.wav", "--prompt-text", "t", "--prompt-tokens", "t.txt",
                        "hi"], ["--prompt-tokens needs --speaker"]))


def test_bad_wav_is_a_bad_wav():
    """a prompt that is not a WAV says so (before the model loads), never 'bad model file'."""
    bad = os.path.join(TMP, "bad.wav")
    with open(bad, "wb") as fh:
        fh.write(b"RIFF\x10\x00\x00\x00WAVEjunkjunkjunk")
    need_model()
    msg = refused(["-m", MODEL, "--prompt-wav", bad, "--prompt-text", "t", "hi"],
                  ["--prompt-wav", "bad.wav", "not a WAV file"], status=1)
    assert "model file" not in msg, msg
    say(msg)
    say(refused(["-m", MODEL, "--prompt-wav", os.path.join(TMP, "none.wav"), "--prompt-text", "t",
                 "hi"], ["--prompt-wav", "none.wav", "No such file"], status=1))
    say(refused(["-m", NO_MODEL, "-v", "v.gguf", "hi"], ["-m", "no-such-model.gguf", "No such file"],
                status=1))


def test_stdout_wav_and_raw():
    """-o - writes the WAV to standard output (the file's bytes); --raw the PCM alone, also streamed."""
    v = voice()
    args = ["-m", MODEL, "-v", v, "--max-tokens", "20", "--seed", "9", "Hello there."]
    f = os.path.join(TMP, "file.wav")
    rc, so, se = run(args + ["-o", f])
    assert rc == 0 and so == b"", (se, so[:40])
    with open(f, "rb") as fh:
        want = fh.read()
    rc, wav, se = run(args + ["-o", "-"])
    assert rc == 0, se
    assert wav == want, "the WAV on standard output differs from the file's"
    with wave.open(f) as w:
        n, rate = w.getnframes(), w.getframerate()
    assert n > 0 and rate == 24000 and len(want) == 44 + 2 * n
    rc, raw, se = run(args + ["-o", "-", "--raw"])
    assert rc == 0 and raw == want[44:], "--raw is not the WAV's PCM"
    rc, raws, se = run(args + ["-o", "-", "--raw", "--stream"])
    assert rc == 0 and raws == want[44:], "--raw --stream is not the WAV's PCM"
    assert "chunk at" in se, se
    rf = os.path.join(TMP, "file.pcm")
    rc, so, se = run(args + ["-o", rf, "--raw"])
    with open(rf, "rb") as fh:
        assert rc == 0 and fh.read() == want[44:]
    say(f"-o -: {len(wav)} bytes of WAV ({n} samples at {rate} Hz) == the file; --raw (file, "
        f"stdout, streamed) == its PCM")
    # a terminal gets no binary
    master, slave = pty.openpty()
    try:
        rc, so, se = run(args + ["-o", "-"], stdout=slave)
    finally:
        os.close(slave)
        os.close(master)
    assert rc == 2 and "terminal" in se and "model loaded" not in se, se
    say(se.strip())


def test_speed_and_stream():
    """--speed 1.5 --stream refused; --speed 1.5 alone works and prints no zeroed stage times."""
    say(refused(["-m", NO_MODEL, "-v", "v.gguf", "--speed", "1.5", "--stream", "hi"],
                ["--speed 1.5", "--stream"]))
    v = voice()
    args = ["-m", MODEL, "-v", v, "--max-tokens", "20", "--seed", "9", "-o", "-", "Hello there."]
    rc, fast, se = run(args + ["--speed", "1.5"])
    assert rc == 0, se
    assert "llm 0.000" not in se and "first audio 0.000" not in se, se
    assert "speed 1.50" in se, se
    rc, normal, se1 = run(args)
    assert rc == 0
    n_fast, n_norm = (len(fast) - 44) // 2, (len(normal) - 44) // 2
    assert n_fast < n_norm, (n_fast, n_norm)
    rc, same, se = run(args + ["--speed", "1", "--stream"])
    assert rc == 0 and same == normal, "--speed 1 --stream differs from the default"
    say(f"--speed 1.5: {n_fast} samples vs {n_norm}; stats: {se1.strip().splitlines()[-2]!r} "
        f"without --speed; with it: no per-stage times")


def test_no_gpu_message():
    """--device 0 where no GPU is visible says there is none (or no CUDA in the build), names -1."""
    need_model()
    rc, so, se = run(["-m", MODEL, "-v", voice(), "--device", "0", "-o", "-", "hi"],
                     env={"CUDA_VISIBLE_DEVICES": ""})
    assert rc == 1, se
    low = se.lower()
    assert "insufficient" not in low, se
    assert ("without cuda" in low or "no cuda gpu found" in low or "no nvidia gpu driver" in low), se
    assert "-1" in se, se
    say(se.strip().splitlines()[-1])


TESTS = [test_help_and_version, test_missing_inputs_named, test_numbers_checked_before_load,
         test_mode_checked_before_load, test_voice_options_conflicts, test_bad_wav_is_a_bad_wav,
         test_stdout_wav_and_raw, test_speed_and_stream, test_no_gpu_message]


def main():
    if not os.path.exists(CLI):
        print(f"test_cli: {CLI} not found (make build/bin/cosyvoice-say, or set COSY_CLI)")
        return 1
    return run_tests(TESTS, TMP)


if __name__ == "__main__":
    sys.exit(main())
