#!/usr/bin/env python3
"""Write the seed corpora and dictionaries of the fuzz targets (tests/fuzz/README.md).

    tests/fuzz/make_seeds.py OUT_DIR DEMO_MODEL DEMO_VOICE [--extra-model MODEL] [--shared DIR]

Writes OUT_DIR/seeds/<target>/ and OUT_DIR/dict/<target>.dict. Seeds are real files made by the
project's tools: the demo model and voice of tools/make_model.py, more voice files through
make_model.write_voice and python/cosyvoice/convert/gguf_writer.py, a GGUF holding every value and tensor type, WAV
files of every encoding lib/audio.c reads (its header comment lists them), and texts. Dictionaries:
tests/fuzz/<target>.dict plus what the model files hold (every key and tensor name of the demo
model and voice; every special token of the tokenizers). With --shared, the golden tokenizer
texts (golden/tokenizer/cases.jsonl) become tokenizer seeds too.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import gguf_writer as gw  # noqa: E402
import make_model  # noqa: E402


# ---- a minimal GGUF header reader (keys, tensor names, data offset, token types) ------------

def read_header(path):
    with open(path, "rb") as fh:
        b = fh.read()
    pos = [0]

    def take(fmt):
        v = struct.unpack_from(fmt, b, pos[0])
        pos[0] += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def s():
        n = take("<Q")
        v = b[pos[0]:pos[0] + n]
        pos[0] += n
        return v

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    assert b[:4] == b"GGUF"
    pos[0] = 4
    _, nt, nkv = take("<IQQ")
    kv, align = {}, 32
    for _ in range(nkv):
        key = s().decode()
        t = take("<I")
        if t == gw.T_STRING:
            kv[key] = s()
        elif t == gw.T_ARRAY:
            et, n = take("<IQ")
            if et == gw.T_STRING:
                kv[key] = [s() for _ in range(n)]
            else:
                kv[key] = list(struct.unpack_from(f"<{n}i", b, pos[0])) if et == gw.T_INT32 else None
                pos[0] += n * sizes[et]
        else:
            kv[key] = struct.unpack_from({4: "<I", 6: "<f"}.get(t, "<I"), b, pos[0])[0]
            if key == "general.alignment":
                align = kv[key]
            pos[0] += sizes[t]
    names = []
    for _ in range(nt):
        names.append(s().decode())
        nd = take("<I")
        pos[0] += 8 * nd + 4 + 8
    data_offset = (pos[0] + align - 1) // align * align
    return b, kv, names, data_offset


def specials(kv):
    toks, types = kv.get("tokenizer.ggml.tokens", []), kv.get("tokenizer.ggml.token_type", [])
    return [t for t, ty in zip(toks, types) if ty in (3, 4)]


# ---- WAV files (RIFF/WAVE, little-endian) -------------------------------------------------------

GUID_TAIL = bytes([0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71])


def wav(samples, rate=24000, channels=1, bits=16, fmt_tag=1, extensible=False, extra_chunks=(),
        riff_size=None, data_size=None, valid_bits=None):
    """samples: float array in [-1, 1], interleaved when channels > 1."""
    x = np.asarray(samples, dtype=np.float64)
    if fmt_tag == 3:
        data = x.astype("<f4" if bits == 32 else "<f8").tobytes()
    elif bits == 8:
        data = np.clip(np.round(x * 128 + 128), 0, 255).astype(np.uint8).tobytes()
    elif bits == 24:
        v = np.clip(np.round(x * 8388608), -8388608, 8388607).astype("<i4")
        data = b"".join(int(i).to_bytes(3, "little", signed=True) for i in v)
    else:
        scale, dt = {16: (32768, "<i2"), 32: (2147483648, "<i4")}[bits]
        data = np.clip(np.round(x * scale), -scale, scale - 1).astype(dt).tobytes()
    block = channels * bits // 8
    tag = 0xFFFE if extensible else fmt_tag
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    if extensible:
        fmt += struct.pack("<HHI", 22, valid_bits or bits, 0) + struct.pack("<H", fmt_tag) + GUID_TAIL
    elif fmt_tag == 3:
        fmt += struct.pack("<H", 0)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    for cid, payload in extra_chunks:
        body += cid + struct.pack("<I", len(payload)) + payload + (b"\0" if len(payload) & 1 else b"")
    body += b"data" + struct.pack("<I", len(data) if data_size is None else data_size) + data
    if len(data) & 1:
        body += b"\0"
    return b"RIFF" + struct.pack("<I", len(body) if riff_size is None else riff_size) + body


def tone(n, f=440.0, rate=24000, amp=0.5):
    return amp * np.sin(2 * math.pi * f * np.arange(n) / rate)


def write(d, name, data):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as fh:
        fh.write(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("demo_model")
    ap.add_argument("demo_voice")
    ap.add_argument("--extra-model", action="append", default=[],
                    help="another model whose special tokens go into the tokenizer dictionary")
    ap.add_argument("--shared", help="the shared reference data directory (optional)")
    a = ap.parse_args()
    seeds = os.path.join(a.out, "seeds")
    tmp = os.path.join(a.out, "tmp")
    os.makedirs(tmp, exist_ok=True)

    # -- voice files (fuzz_voice, fuzz_gguf) --
    with open(a.demo_voice, "rb") as fh:
        demo_voice = fh.read()
    voices = {"demo-voice.gguf": demo_voice}
    for n, text in ((1, ""), (3, "Hi.<|endofprompt|>\u4f60\u597d")):
        p = os.path.join(tmp, "v.gguf")
        make_model.write_voice(p, seed=n, n_tokens=n, prompt_text=text)
        with open(p, "rb") as fh:
            voices[f"voice-{n}-tokens.gguf"] = fh.read()
    w = gw.Writer()   # no prompt tokens: only the speaker embedding
    w.add_string("general.architecture", "cosyvoice3-voice")
    w.add_u32("cosyvoice.voice.format_version", 1)
    w.add_string("cosyvoice.voice.prompt_text", "")
    w.add_tensor("voice.speaker_embedding", np.linspace(-1, 1, 192, dtype=np.float32), gw.GGML_F32)
    p = os.path.join(tmp, "v.gguf")
    w.write(p)
    with open(p, "rb") as fh:
        voices["voice-0-tokens.gguf"] = fh.read()
    for name, data in voices.items():
        write(os.path.join(seeds, "voice"), name, data)
        write(os.path.join(seeds, "gguf"), name, data)

    # -- a GGUF with every value type and every tensor type (fuzz_gguf) --
    w = gw.Writer()
    w.add_u32("a.u32", 7)
    w.add_i32("a.i32", -7)
    w.add_f32("a.f32", 0.5)
    w.add_string("a.str", "text")
    for key, t, size, fmt in (("a.u8", 0, 1, "<B"), ("a.i8", 1, 1, "<b"), ("a.u16", 2, 2, "<H"),
                              ("a.i16", 3, 2, "<h"), ("a.bool", 7, 1, "<B"), ("a.u64", 10, 8, "<Q"),
                              ("a.i64", 11, 8, "<q"), ("a.f64", 12, 8, "<d")):
        w.kv.append((key, t, struct.pack(fmt, 1)))
    w.add_array("a.arr_u32", gw.T_UINT32, [1, 2, 3])
    w.add_array("a.arr_i32", gw.T_INT32, [-1, 2])
    w.add_array("a.arr_f32", gw.T_FLOAT32, [0.25])
    w.add_array("a.arr_str", gw.T_STRING, ["x", "", "yz"])
    w.kv.append(("a.arr_u8", gw.T_ARRAY, struct.pack("<IQ", 0, 3) + b"\1\2\3"))
    w.add_tensor("t.f32", np.arange(6, dtype=np.float32).reshape(2, 3), gw.GGML_F32)
    w.add_tensor("t.f16", np.ones((2, 2, 2), dtype=np.float32), gw.GGML_F16)
    w.add_tensor("t.bf16", np.ones((1, 2, 1, 3), dtype=np.float32), gw.GGML_BF16)
    w.add_tensor("t.i32", np.arange(5, dtype=np.int32), gw.GGML_I32)
    w.write(p)
    with open(p, "rb") as fh:
        write(os.path.join(seeds, "gguf"), "all-types.gguf", fh.read())

    # -- the demo model's header (fuzz_model pads it with zeros; fuzz_gguf sees it truncated) --
    model, kv, names, data_offset = read_header(a.demo_model)
    write(os.path.join(seeds, "model"), "demo-header.gguf", model[:data_offset])
    write(os.path.join(seeds, "gguf"), "demo-header-truncated.gguf", model[:data_offset])

    # -- WAV files (fuzz_wav): every encoding the reader documents --
    wd = os.path.join(seeds, "wav")    # (copied to seeds/mel below)
    t = tone(800)
    st = np.stack([tone(400, 300), tone(400, 500)], 1).reshape(-1)
    write(wd, "pcm16-24k.wav", wav(t))
    write(wd, "pcm16-16k.wav", wav(tone(800, rate=16000), rate=16000))
    write(wd, "pcm8-22k.wav", wav(tone(600, rate=22050), rate=22050, bits=8))
    write(wd, "pcm24-48k-stereo.wav", wav(st, rate=48000, channels=2, bits=24))
    write(wd, "pcm32-24k.wav", wav(t, bits=32))
    write(wd, "float32-24k.wav", wav(t, bits=32, fmt_tag=3, extra_chunks=[(b"fact", struct.pack("<I", 800))]))
    write(wd, "float64-44k.wav", wav(tone(500, rate=44100), rate=44100, bits=64, fmt_tag=3))
    write(wd, "extensible-pcm20in24.wav", wav(t, bits=24, extensible=True, valid_bits=20))
    write(wd, "extensible-float-stereo.wav", wav(st, channels=2, bits=32, fmt_tag=3, extensible=True))
    write(wd, "list-chunk-odd.wav", wav(tone(301), extra_chunks=[(b"LIST", b"INFOISFT\3\0\0\0ab\0")]))
    write(wd, "streaming-sizes.wav", wav(t, riff_size=0xFFFFFFFF, data_size=0xFFFFFFFF))
    write(wd, "empty-data.wav", wav([]))
    write(wd, "pcm16-8k-short.wav", wav(tone(40, rate=8000), rate=8000))

    shutil.copytree(wd, os.path.join(seeds, "mel"))

    # -- texts (fuzz_tokenizer) --
    texts = [
        "Hello world!", "The quick brown fox jumps over the lazy dog.",
        "It's I'm you're we've they'll he'd IT'S \u017ft",
        "   leading and  multiple   spaces\t\ttabs\r\n\r\nnewlines \n",
        "Numbers 1234567890 \u0661\u0662 \u00bd \u2460 3.14",
        "\u4f60\u597d\uff0c\u4e16\u754c\u3002\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
        "\u3053\u3093\u306b\u3061\u306f\u3001\u30ab\u30bf\u30ab\u30ca\u3002",
        "\ud55c\uad6d\uc5b4 \u1112\u1161\u11ab",  # Hangul syllables and conjoining jamo
        "e\u0301 a\u0308\u0304 \u212b \u1e9b\u0323",  # combining marks, NFC cases
        "<|endofprompt|>[breath]hello[laughter] <|endoftext|><|im_start|>x<|im_end|>",
        "You are a helpful assistant.<|endofprompt|>Hello.",
        "emoji \U0001f600\U0001f44d\U0001f3fd, symbols \u2014 \u00a9 \u2122 \u20ac",
        "\u00a0\u2003\u3000\u2028\u2029\u0085 odd spaces",
        "a\u0000b", "",
    ]
    if a.shared:
        cases = os.path.join(a.shared, "golden", "tokenizer", "cases.jsonl")
        if os.path.exists(cases):
            with open(cases, encoding="utf-8") as fh:
                texts += [json.loads(line)["text"] for line in fh if line.strip()]
    td = os.path.join(seeds, "tokenizer")
    for i, s in enumerate(texts):
        write(td, f"text-{i:03d}.txt", s.encode("utf-8"))
    # (fuzz_text: the same texts plus numbers, dates, money, units for the grammars)
    tn = texts + ["It costs $12.50 on 2024-03-05 at 10:30am, 3.5kg, 25%, No. 7, 1st and 22nd.",
                  "今天是2024年3月5日，温度25°C，价格12.5元。",
                  "Call 555-0123 or +1 (800) 123-4567; version 1.2.3; 1,234,567 people.",
                  "A very long sentence, " * 20 + "end."]
    for i, s in enumerate(tn):
        write(os.path.join(seeds, "text"), f"text-{i:03d}.txt", s.encode("utf-8"))

    # -- synthesis requests (fuzz_api): 6 knob bytes, text, NUL, second string --
    api = [
        (0x00, "Hello from libcosyvoice.", ""),
        (0x01, "Streaming, pulled.", ""),
        (0x02, "Cross-lingual text.", ""),
        (0x04, "Instructed text.", "Speak slowly."),
        (0x06, "A voice from features.", "Prompt text.<|endofprompt|>"),
        (0x08, "  no   normalization\n", ""),
        (0x10, "At 16 kHz.", ""),
        (0x21, "Cancelled after the first read.", ""),
        (0x40, "Faster speech.", ""),
        (0x80, "Pushed and stopped.", ""),
        (0x00, "<|endofprompt|>[breath] \u4f60\u597d", ""),
        (0x00, "   ", ""),
    ]
    ad = os.path.join(seeds, "api")
    for i, (k0, text, second) in enumerate(api):
        knobs = bytes([k0, 7, 2, 24, 3, i])
        write(ad, f"req-{i:03d}.bin", knobs + text.encode("utf-8") + b"\0" + second.encode("utf-8"))

    # -- streamed texts (fuzz_textstream): 5 knob bytes, then the text with a NUL at every push
    # boundary. Real texts (bench/text/*.txt cut into sentences, the inputs of the text golden
    # cases tests/data/text/*.tsv, a few hand-made ones), cut at random places: inside UTF-8
    # characters and words as often as between them. Fixed random generator: same seeds each time.
    import random
    rng = random.Random(20240305)
    root = os.path.join(HERE, "..", "..")
    stream_texts = []
    for name in ("en.txt", "zh.txt"):
        with open(os.path.join(root, "bench", "text", name), encoding="utf-8") as fh:
            body = fh.read().strip()
        sent, cur = [], ""
        for ch in body:
            cur += ch
            if ch in ".!?;\u3002\uff01\uff1f\uff1b" and len(cur.encode("utf-8")) > 40:
                sent.append(cur)
                cur = ""
        sent.append(cur)
        for i in range(0, len(sent), 2):
            stream_texts.append("".join(sent[i:i + 2]))
    for name in ("en.tsv", "zh.tsv", "raw.tsv", "long.tsv"):
        with open(os.path.join(root, "tests", "data", "text", name), encoding="utf-8") as fh:
            rows = [ln.rstrip("\n").split("\t") for ln in fh if ln[:2] == "N\t"]
        step = max(1, len(rows) // 12)
        stream_texts += [r[1][:600] for r in rows[::step] if len(r) > 1]
    stream_texts += ["Hi. Go now.", "Hi there", "\u4f60\u597d\u3002\u518d\u89c1\uff01",
                     "[breath]Hello<|endofprompt|> there.", "a\u0301 \u212b.\n\u00a0x;  y",
                     "It's 3.5 kg; ok? Yes! \u2026done\u3002", "   "]
    sd = os.path.join(seeds, "textstream")
    for i, t in enumerate(stream_texts):
        b = t.encode("utf-8")
        for variant in range(2):
            cuts = sorted(rng.sample(range(1, len(b)), min(len(b) - 1, rng.randint(0, 12)))) \
                if len(b) > 1 else []
            pieces = [b[x:y] for x, y in zip([0] + cuts, cuts + [len(b)])]
            k0 = rng.randrange(256) & ~0x18 if variant == 0 else rng.randrange(256)
            k1 = rng.randrange(128) | (0x80 if len(b) > 12 else 0)
            knobs = bytes([k0, k1, rng.randrange(256), rng.randrange(len(pieces) + 2), rng.randrange(len(pieces) + 2)])
            write(sd, f"stream-{i:03d}-{variant}.bin", knobs + b"\0".join(pieces))

    # -- dictionaries --
    dd = os.path.join(a.out, "dict")
    os.makedirs(dd, exist_ok=True)

    def dict_line(s):
        if isinstance(s, str):
            s = s.encode("utf-8")
        return '"' + "".join(chr(c) if 32 <= c < 127 and c not in (34, 92) else "\\x%02X" % c
                             for c in s) + '"'

    def write_dict(name, extra):
        with open(os.path.join(HERE, name + ".dict"), encoding="utf-8") as fh:
            base = fh.read()
        seen, lines = set(), []
        for s in extra:
            line = dict_line(s)
            if line not in seen and line not in base:
                seen.add(line)
                lines.append(line)
        with open(os.path.join(dd, name + ".dict"), "w", encoding="utf-8") as fh:
            fh.write(base + "# from the model files\n" + "\n".join(lines) + "\n")

    _, vkv, vnames, _ = read_header(a.demo_voice)
    keys = list(kv) + list(vkv) + ["general.alignment"]
    write_dict("gguf", keys + names + vnames)
    spec = specials(kv)
    for m in a.extra_model:
        if os.path.exists(m):
            spec += specials(read_header(m)[1])
    write_dict("tokenizer", spec)
    write_dict("textstream", spec)
    write_dict("wav", [])
    print(f"fuzz seeds: {sum(len(f) for _, _, f in os.walk(seeds))} files in {seeds}; "
          f"dictionaries in {dd} ({len(keys) + len(names) + len(vnames)} GGUF names, "
          f"{len(set(spec))} special tokens)")


if __name__ == "__main__":
    main()
