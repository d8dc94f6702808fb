#!/usr/bin/env python3
"""Make libcosyvoice model files with random weights (and a demo voice file).

    tools/make_model.py --preset full|small|demo -o MODEL.gguf [--seed N] [--dtype bf16|f16|f32]
                        [--tokenizer DIR] [--added-tokens FILE] [--voice VOICE.gguf]
                        [--wetext DIR | --no-text-grammars] [--frontend none|small|full|preset]

Presets (geometry; docs/model-format.md lists every tensor each implies):
  full   the real Fun-CosyVoice3-0.5B geometry: LLM 896 x 24 layers (14 heads, 2 kv heads, MLP
         4864, text vocabulary 151936, speech vocabulary 6761); flow pre-lookahead 1024, DiT
         1024 x 22 layers (16 heads, ff 2048, conv_pos kernel 31 in 16 groups); HiFT 512/512.
         The real tokenizer from --tokenizer (default $COSY_SHARED/tokenizer, else
         ../shared/tokenizer) and --added-tokens (default DIR/added_tokens.json). ~1.7 GB in bf16.
  small  the golden small geometry (the small model of the golden data: LLM 128 x 2
         layers, 2 heads, 1 kv head, MLP 384, text vocabulary 151936; flow 128, DiT 128 x 2, ff 256;
         HiFT 64/64) with the real tokenizer when it is found (else the demo tokenizer, same
         151936-row text embedding).
  demo   the small geometry with a tokenizer this script makes itself (the repository ships no
         shared data): the 256 GPT-2 byte tokens, a few hundred BPE merges learned from the
         English paragraph below, and the specials <|endoftext|>, <|im_start|>, <|im_end|>
         (type 3) and <|endofprompt|>, [breath], [laughter] (type 4); the text vocabulary is the
         token count rounded up to 64.

Weights are seeded numpy draws (one generator per tensor, seeded by (--seed, crc32(name)), so a
tensor does not depend on the order of writing), laid out as the official checkpoints
(llm.pt / flow.pt / hift.pt state_dict names) and mapped to the file's names by the converter's
own map_llm / map_flow / map_hift, then written by convert.write_model. LLM and flow tensors are
produced block by block while the file is written (gguf_writer.Lazy), so the full preset needs
only a few hundred MB of memory. The fill:
  LLM    embed_tokens, speech_embedding N(0, 1); q/k/v/o/gate/up/down N(0, 1/sqrt(fan_in));
         q/k/v biases N(0, 0.1); RMSNorm weights N(1, 0.1); llm_decoder N(0, 3/sqrt(H)) (peakier
         token distributions than 1/sqrt(H)).
  flow   input_embedding N(0, 1); every Linear / Conv1d N(0, gain/sqrt(fan_in)) with gain 2 for the
         AdaLN projections (attn_norm.linear, norm_out.linear), 10 for spk_embed_affine_layer
         (its input is an L2-normalised 192-vector), 1 otherwise; biases N(0, 0.05), except
         proj_out.bias N(-4, 0.5): the flow output x = z + integral(v dt) then sits around -4, in
         the range of a natural-log mel, which is what HiFT sees in real use.
  HiFT   weight-normalised convs (all but source_downs, m_source and the F0 classifier): random
         directions with row norm g ~ U(0.8, 1.2) (= the folded g * v / ||v||); others
         N(0, 1/sqrt(fan_in)); biases N(0, 0.05); Snake alpha U(0.5, 1.5). Then two layers are
         calibrated with a numpy HiFT forward pass (hift_forward below; checked against the golden
         data by tests/test_tools.py) on a smooth random log-mel: the F0 classifier so that
         f0 = |140 + 40 z| Hz (z ~ standardised projection: voiced almost everywhere), and
         conv_post so that each log-magnitude channel has std 0.8 and the common bias gives a
         waveform RMS of 0.1 (not silent, hardly clipped at +-0.99). The statistics are printed.

--frontend full|small|preset adds random front-end models (speech tokenizer v3 + CAM++; the
geometry and fill are in frontend_state_dicts below), mapped by python/cosyvoice/convert/frontend.py like a
real state dict, so cosy_voice_from_audio works with the file. full: width 1280, 12 blocks, CAM++
growth 32 / bottleneck 128 / 128 initial channels (~1 GB more, always f32); small: the test
geometry of tests/data/frontend.

The text normalization grammars of the installed wetext wheel (or --wetext DIR) are packed as
tools/convert.py does (docs/model-format.md section 9), for every preset.

--voice PATH writes a demo voice file (format: docs/model-format.md "Voice files"): 50 random
prompt speech tokens, a smooth random log-mel [100][80] in [-10, 2], a N(0, 1) speaker embedding
and the prompt text "You are a helpful assistant.<|endofprompt|>Hello.".
"""
import argparse
import collections
import os
import re
import sys
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import convert  # noqa: E402
import gguf_writer as gw  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRESETS = {
    "full": dict(hidden=896, layers=24, heads=14, kv_heads=2, inter=4864, text_vocab=151936,
                 speech_vocab=6761, pre_channels=1024, dit_dim=1024, dit_depth=22, dit_ff=2048,
                 conv_pos_kernel=31, conv_pos_groups=16, hift_base=512, hift_cond=512),
    "small": dict(hidden=128, layers=2, heads=2, kv_heads=1, inter=384, text_vocab=151936,
                  speech_vocab=6761, pre_channels=128, dit_dim=128, dit_depth=2, dit_ff=256,
                  conv_pos_kernel=31, conv_pos_groups=16, hift_base=64, hift_cond=64),
}
PRESETS["demo"] = dict(PRESETS["small"], text_vocab=None)   # from the demo tokenizer

HEAD_DIM = 64
MEL = 80
HIFT_UP_KERNELS = [16, 11, 7]
HIFT_RB_KERNELS = [3, 7, 11]
HIFT_RB_DILATIONS = [1, 3, 5]
HIFT_SRC_RB_KERNELS = [7, 7, 11]
HIFT_NB_HARMONICS = 8

DEMO_PROMPT_TEXT = "You are a helpful assistant.<|endofprompt|>Hello."
DEMO_SPECIALS = [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3),
                 ("<|endofprompt|>", 4), ("[breath]", 4), ("[laughter]", 4)]

# The demo tokenizer's training text (written for this project).
DEMO_TEXT = """\
Hello from libcosyvoice. This is a small demonstration model with random weights, so it does not
really speak: it babbles in a voice of its own. The library reads a model file, turns the text into
tokens, and then three networks take turns. The first one is a language model that writes speech
tokens, twenty five of them for every second of sound. The second one is a flow model that turns
those tokens into a mel spectrogram, fifty frames for every second, with eighty bands in each frame.
The third one is a vocoder that turns the spectrogram into a waveform at twenty four thousand
samples per second. When the weights are real, the voice sounds like the person in the prompt;
when they are random, as they are here, the sound is only there to show that every part of the
program runs from the first byte of text to the last sample of audio. Please be patient with it,
and try another sentence: the quick brown fox jumps over the lazy dog, while seven wizards quietly
hum a cheerful tune. What time is it? It is a quarter past three in the afternoon, and the weather
is fine. Numbers such as 1, 2, 3, 10, 42 and 2024 are read one digit at a time by the tokenizer.
Thank you for listening, and have a wonderful day!
"""

# A rough English version of the Qwen2 pre-tokenizer split (letters, single digits, punctuation
# runs, whitespace), enough to learn merges that never cross word boundaries.
_PRETOK = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d| ?[^\s\w]+|\s+(?!\S)|\s+")


# ----------------------------------------------------------------------------------------------
# tokenizers

def train_bpe(text, n_merges):
    """Byte-level BPE: the most frequent adjacent pair first (ties: the smallest pair in code point
    order), until n_merges or no pair is left. -> (tokens in id order, merges "left right")."""
    b2u = convert.bytes_to_unicode()
    words = collections.Counter()
    for piece in _PRETOK.findall(text):
        words[tuple(b2u[b] for b in piece.encode("utf-8"))] += 1
    tokens = list(b2u.values())          # the 256 byte tokens, in GPT-2 id order
    known = set(tokens)
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(f"{best[0]} {best[1]}")
        new = best[0] + best[1]
        if new not in known:
            tokens.append(new)
            known.add(new)
        merged = collections.Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        words = merged
    return tokens, merges


def demo_tokenizer(n_merges=300):
    """-> the (tokens, types, merges, eos, endofprompt) tuple convert.write_model takes."""
    tokens, merges = train_bpe(DEMO_TEXT, n_merges)
    types = [1] * len(tokens)
    for s, t in DEMO_SPECIALS:
        tokens.append(s)
        types.append(t)
    return tokens, types, merges, tokens.index("<|endoftext|>"), tokens.index("<|endofprompt|>")


def default_tokenizer_dir():
    sh = os.environ.get("COSY_SHARED")
    return os.path.join(sh if sh else os.path.join(REPO, "..", "shared"), "tokenizer")


# ----------------------------------------------------------------------------------------------
# random tensors

class _Ckpt:
    """Stands in for a ptread.Tensor: the converter's map_* functions only read `.array`."""

    def __init__(self, array):
        self.array = array


class Filler:
    def __init__(self, seed):
        self.seed = seed

    def rng(self, name):
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])

    def normal(self, name, shape, std, mean=0.0):
        """A Lazy N(mean, std) tensor generated in blocks of ~4M elements along dim 0."""
        shape = tuple(shape)

        def gen():
            rng = self.rng(name)
            per_row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            step = max(1, (1 << 22) // per_row)
            for r in range(0, shape[0], step):
                b = rng.standard_normal((min(step, shape[0] - r),) + shape[1:], dtype=np.float32)
                if std != 1.0:
                    b *= np.float32(std)
                if mean:
                    b += np.float32(mean)
                yield b
        return _Ckpt(gw.Lazy(shape, gen))

    def linear(self, name, shape, gain=1.0):
        fan_in = int(np.prod(shape[1:]))
        return self.normal(name, shape, gain / np.sqrt(fan_in))


def llm_checkpoint(g, f):
    """The llm.pt state_dict layout (official names) with Lazy random tensors."""
    H, q, kv, I = g["hidden"], g["heads"] * HEAD_DIM, g["kv_heads"] * HEAD_DIM, g["inter"]
    pre = "llm.model.model."
    sd = {pre + "embed_tokens.weight": f.normal(pre + "embed_tokens.weight", (g["text_vocab"], H), 1.0)}
    for i in range(g["layers"]):
        p = f"{pre}layers.{i}."
        for k, shp in (("self_attn.q_proj", (q, H)), ("self_attn.k_proj", (kv, H)),
                       ("self_attn.v_proj", (kv, H)), ("self_attn.o_proj", (H, q)),
                       ("mlp.gate_proj", (I, H)), ("mlp.up_proj", (I, H)), ("mlp.down_proj", (H, I))):
            sd[p + k + ".weight"] = f.linear(p + k + ".weight", shp)
        for k, n in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            sd[p + f"self_attn.{k}.bias"] = f.normal(p + f"self_attn.{k}.bias", (n,), 0.1)
        for k in ("input_layernorm", "post_attention_layernorm"):
            sd[p + k + ".weight"] = f.normal(p + k + ".weight", (H,), 0.1, 1.0)
    sd[pre + "norm.weight"] = f.normal(pre + "norm.weight", (H,), 0.1, 1.0)
    sd["speech_embedding.weight"] = f.normal("speech_embedding.weight", (g["speech_vocab"], H), 1.0)
    sd["llm_decoder.weight"] = f.normal("llm_decoder.weight", (g["speech_vocab"], H), 3.0 / np.sqrt(H))
    return sd


def flow_checkpoint(g, f):
    """The flow.pt state_dict layout with Lazy random tensors."""
    D, P, ff = g["dit_dim"], g["pre_channels"], g["dit_ff"]
    cin, k = D // g["conv_pos_groups"], g["conv_pos_kernel"]
    sd = {}

    def lin(name, shape, gain=1.0, bias=True, bias_mean=0.0, bias_std=0.05):
        sd[name + ".weight"] = f.linear(name + ".weight", shape, gain)
        if bias:
            sd[name + ".bias"] = f.normal(name + ".bias", (shape[0],), bias_std, bias_mean)

    sd["input_embedding.weight"] = f.normal("input_embedding.weight", (convert.SPEECH_TOKENS, MEL), 1.0)
    lin("spk_embed_affine_layer", (MEL, convert.SPK_DIM), gain=10.0)
    lin("pre_lookahead_layer.conv1", (P, MEL, 4))
    lin("pre_lookahead_layer.conv2", (MEL, P, 3))
    est = "decoder.estimator."
    lin(est + "time_embed.time_mlp.0", (D, 256))
    lin(est + "time_embed.time_mlp.2", (D, D))
    lin(est + "input_embed.proj", (D, 4 * MEL))
    lin(est + "input_embed.conv_pos_embed.conv1.0", (D, cin, k))
    lin(est + "input_embed.conv_pos_embed.conv2.0", (D, cin, k))
    for i in range(g["dit_depth"]):
        b = f"{est}transformer_blocks.{i}."
        lin(b + "attn_norm.linear", (6 * D, D), gain=2.0)
        for n in ("to_q", "to_k", "to_v", "to_out.0"):
            lin(b + "attn." + n, (D, D))
        lin(b + "ff.ff.0.0", (ff, D))
        lin(b + "ff.ff.2", (D, ff))
    lin(est + "norm_out.linear", (2 * D, D), gain=2.0)
    lin(est + "proj_out", (MEL, D), bias_mean=-4.0, bias_std=0.5)
    return sd


def hift_hparams(g):
    hp = dict(base_channels=g["hift_base"], cond_channels=g["hift_cond"],
              nb_harmonics=HIFT_NB_HARMONICS, istft_n_fft=16)
    hpa = dict(upsample_kernel_sizes=HIFT_UP_KERNELS, resblock_kernel_sizes=HIFT_RB_KERNELS,
               source_resblock_kernel_sizes=HIFT_SRC_RB_KERNELS)
    return hp, hpa


def hift_checkpoint(g, f):
    """The hift.pt state_dict layout (generator. prefix, weight norm as parametrizations
    original0 = g [out,1,1] / original1 = v) with real arrays."""
    hp, hpa = hift_hparams(g)
    shapes = convert.expected_hift_shapes(hp, hpa)
    sd = {}
    for name, shp in shapes.items():
        base = "generator." + name[len("hift."):]
        rng = f.rng(base)
        if name.endswith(".alpha"):
            sd[base] = _Ckpt(rng.uniform(0.5, 1.5, shp).astype(np.float32))
        elif name.endswith(".bias"):
            sd[base] = _Ckpt((0.05 * rng.standard_normal(shp)).astype(np.float32))
        elif len(shp) == 3 and ".source_downs." not in name:
            v = rng.standard_normal(shp).astype(np.float32)
            gn = rng.uniform(0.8, 1.2, (shp[0], 1, 1)).astype(np.float32)
            stem = base[: -len(".weight")] + ".parametrizations.weight."
            sd[stem + "original0"] = _Ckpt(gn)
            sd[stem + "original1"] = _Ckpt(v)
        else:
            fan_in = int(np.prod(shp[1:]))
            sd[base] = _Ckpt((rng.standard_normal(shp) / np.sqrt(fan_in)).astype(np.float32))
    return sd


# ----------------------------------------------------------------------------------------------
# HiFT forward pass in numpy (docs/model.md section 8, finalize=True), float64 except where the
# reference rounds to float32 (the source phase). Used to calibrate the random HiFT weights; its
# agreement with the golden data is checked by tests/test_tools.py.

def _conv(x, w, b=None, dilation=1, stride=1):
    """x [Cin, L] (already padded), w [Cout, Cin, K] -> [Cout, Lout] (plain cross-correlation)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    cout, cin, k = w.shape
    lout = (x.shape[1] - dilation * (k - 1) - 1) // stride + 1
    cols = np.lib.stride_tricks.as_strided(
        x, shape=(cin, k, lout), strides=(x.strides[0], x.strides[1] * dilation, x.strides[1] * stride))
    y = np.tensordot(w.astype(np.float64), cols, axes=([1, 2], [0, 1]))
    if b is not None:
        y += np.asarray(b, dtype=np.float64)[:, None]
    return y


def _pad(x, left, right):
    return np.pad(x, ((0, 0), (left, right)))


def _causal_pad(k, d=1):
    return (k * d - d) // 2 * 2 + (k + 1) % 2


def _leaky(x, s):
    return np.where(x >= 0, x, s * x)


def _snake(x, alpha):
    a = np.asarray(alpha, dtype=np.float64)[:, None]
    return x + 1.0 / (a + 1e-9) * np.sin(a * x) ** 2


def _resblock(W, pfx, x, k):
    for j, d in enumerate(HIFT_RB_DILATIONS):
        t = _snake(x, W[f"{pfx}.activations1.{j}.alpha"])
        t = _conv(_pad(t, _causal_pad(k, d), 0), W[f"{pfx}.convs1.{j}.weight"],
                  W[f"{pfx}.convs1.{j}.bias"], dilation=d)
        t = _snake(t, W[f"{pfx}.activations2.{j}.alpha"])
        t = _conv(_pad(t, _causal_pad(k), 0), W[f"{pfx}.convs2.{j}.weight"], W[f"{pfx}.convs2.{j}.bias"])
        x = x + t
    return x


def _hann16():
    n = np.arange(16)
    return 0.5 - 0.5 * np.cos(2 * np.pi * n / 16)      # periodic


def f0_features(W, mel):
    """condnet output before the classifier: [cond_channels, T] (float64)."""
    x = np.asarray(mel, dtype=np.float64)
    x = _conv(_pad(x, 0, 3), W["hift.f0_predictor.condnet.0.weight"], W["hift.f0_predictor.condnet.0.bias"])
    x = np.where(x > 0, x, np.expm1(np.minimum(x, 0)))
    for j in (2, 4, 6, 8):
        x = _conv(_pad(x, 2, 0), W[f"hift.f0_predictor.condnet.{j}.weight"],
                  W[f"hift.f0_predictor.condnet.{j}.bias"])
        x = np.where(x > 0, x, np.expm1(np.minimum(x, 0)))
    return x


def f0_predict(W, mel):
    h = f0_features(W, mel)
    y = W["hift.f0_predictor.classifier.weight"].astype(np.float64) @ h
    return np.abs(y[0] + W["hift.f0_predictor.classifier.bias"][0])


def source(W, f0, rand_ini, sine_noise, threshold=10.0):
    """f0 [T] (Hz) -> excitation s [480 T]. The phase is formed in float32 as the reference does
    (torch's CPU cumsum accumulates in double and rounds each sum). rand_ini has no effect
    (docs/model.md section 8: the frame-rate phase never sees sample 0's offset)."""
    f0 = np.asarray(f0, dtype=np.float32)
    T = f0.shape[0]
    h = np.arange(1, HIFT_NB_HARMONICS + 2, dtype=np.float32)
    rad = np.mod(f0[:, None] * h[None, :] / np.float32(24000), np.float32(1.0))     # [T, 9]
    ph = np.cumsum(rad.astype(np.float64), axis=0).astype(np.float32)
    ph = ph * np.float32(2) * np.float32(np.pi) * np.float32(480)
    sine = np.float32(0.1) * np.sin(ph.astype(np.float64)).astype(np.float32)
    sine = np.repeat(sine, 480, axis=0)                                              # [L, 9]
    uv = (np.repeat(f0, 480) > threshold).astype(np.float32)[:, None]
    noise = (uv * 0.003 + (1 - uv) * 0.1 / 3) * sine_noise[: 480 * T]
    src = sine * uv + noise
    lin = src.astype(np.float64) @ W["hift.m_source.l_linear.weight"][0].astype(np.float64)
    return np.tanh(lin + W["hift.m_source.l_linear.bias"][0])


def decode(W, mel, s, return_pre_post=False):
    """mel [80, T], s [480 T] -> wav [480 T] (clamped to +-0.99)."""
    win = _hann16()
    sp = np.pad(np.asarray(s, dtype=np.float64), 8, mode="reflect")
    F = (sp.shape[0] - 16) // 4 + 1
    frames = np.lib.stride_tricks.as_strided(sp, shape=(F, 16), strides=(sp.strides[0] * 4, sp.strides[0]))
    S = np.fft.rfft(frames * win, axis=1).T                                           # [9, F]
    S = np.concatenate([S.real, S.imag], axis=0)                                      # [18, F]
    x = _conv(_pad(np.asarray(mel, dtype=np.float64), 0, 4), W["hift.conv_pre.weight"], W["hift.conv_pre.bias"])
    rates = [8, 5, 3]
    for i in range(3):
        x = _leaky(x, 0.1)
        k = W[f"hift.ups.{i}.weight"].shape[2]
        x = np.repeat(x, rates[i], axis=1)
        x = _conv(_pad(x, k - 1, 0), W[f"hift.ups.{i}.weight"], W[f"hift.ups.{i}.bias"])
        if i == 2:
            x = np.concatenate([x[:, 1:2], x], axis=1)
        stride = int(np.prod(rates[i + 1:]))
        kd = W[f"hift.source_downs.{i}.weight"].shape[2]
        si = _conv(_pad(S, stride - 1, 0), W[f"hift.source_downs.{i}.weight"],
                   W[f"hift.source_downs.{i}.bias"], stride=stride)
        assert kd == (1 if stride == 1 else 2 * stride)
        si = _resblock(W, f"hift.source_resblocks.{i}", si, HIFT_SRC_RB_KERNELS[i])
        x = x + si
        x = sum(_resblock(W, f"hift.resblocks.{3 * i + j}", x, HIFT_RB_KERNELS[j]) for j in range(3)) / 3
    x = _leaky(x, 0.01)
    if return_pre_post:
        return x
    return post(W, x)


def post(W, x):
    """conv_post + iSTFT (n_fft 16, hop 4, centred) + clamp."""
    o = _conv(_pad(x, 6, 0), W["hift.conv_post.weight"], W["hift.conv_post.bias"])
    mag = np.minimum(np.exp(o[:9]), 100.0)
    ph = np.sin(o[9:])
    spec = mag * np.cos(ph) + 1j * mag * np.sin(ph)                                   # [9, F]
    win = _hann16()
    fr = np.fft.irfft(spec.T, n=16, axis=1) * win                                     # [F, 16]
    F = fr.shape[0]
    n = 16 + 4 * (F - 1)
    y = np.zeros(n)
    env = np.zeros(n)
    for j in range(4):        # overlap-add in 4 strided passes (hop 4 = 16 / 4)
        idx = np.arange(j, F, 4)
        pos = (4 * idx)[:, None] + np.arange(16)[None, :]
        np.add.at(y, pos.reshape(-1), fr[idx].reshape(-1))
        np.add.at(env, pos.reshape(-1), np.tile(win ** 2, len(idx)))
    y = y[8: n - 8] / env[8: n - 8]
    return np.clip(y, -0.99, 0.99)


def hift_forward(W, mel, rand_ini, sine_noise):
    """-> (wav, f0, s) for mel [80, T]."""
    f0 = f0_predict(W, mel).astype(np.float32)
    s = source(W, f0, rand_ini, sine_noise)
    return decode(W, mel, s), f0, s


def demo_mel(rng, frames):
    """A smooth random log-mel [frames, 80] in [-10, 2]: coarse noise on a (time/5, mel/8) grid,
    linearly interpolated, plus a downward spectral tilt."""
    ct, cm = frames // 5 + 2, MEL // 8 + 2
    coarse = rng.standard_normal((ct, cm))
    ti = np.linspace(0, ct - 1, frames)
    mi = np.linspace(0, cm - 1, MEL)
    a = np.array([np.interp(mi, np.arange(cm), row) for row in coarse])              # [ct, 80]
    a = np.array([np.interp(ti, np.arange(ct), a[:, m]) for m in range(MEL)]).T      # [frames, 80]
    a = a - 0.04 * np.arange(MEL)[None, :]
    a = (a - a.min()) / (a.max() - a.min())
    return (-10.0 + 12.0 * a).astype(np.float32)


def calibrate_hift(W, seed, frames=64, target_rms=0.1, log=print):
    """Set the F0 classifier and conv_post (see the module docstring). Modifies W in place and
    returns the statistics of the final waveform on the calibration mel."""
    rng = np.random.default_rng([seed, 0x4849])
    mel = demo_mel(rng, frames).T                                # [80, T]
    rand_ini = rng.random(9).astype(np.float32)
    rand_ini[0] = 0
    noise = rng.random((480 * frames, 9)).astype(np.float32)
    # F0: f0 = |140 + 40 z| with z the standardised projection of the condnet features
    h = f0_features(W, mel)
    v = W["hift.f0_predictor.classifier.weight"][0].astype(np.float64)
    p = v @ h
    sd = p.std() if p.std() > 0 else 1.0
    W["hift.f0_predictor.classifier.weight"] = (40.0 * v / sd)[None, :].astype(np.float32)
    W["hift.f0_predictor.classifier.bias"] = np.array([140.0 - 40.0 * p.mean() / sd], dtype=np.float32)
    f0 = f0_predict(W, mel).astype(np.float32)
    s = source(W, f0, rand_ini, noise)
    x = decode(W, mel, s, return_pre_post=True)
    # conv_post: per-channel std 0.8 (log magnitude) / 2.0 (phase), then a common log-mag offset
    w = W["hift.conv_post.weight"].astype(np.float64)
    b = W["hift.conv_post.bias"].astype(np.float64)
    o = _conv(_pad(x, 6, 0), w, None)
    sdo = o.std(axis=1)
    sdo[sdo == 0] = 1.0
    tgt = np.where(np.arange(18) < 9, 0.8, 2.0)
    w = w * (tgt / sdo)[:, None, None]
    mo = o.mean(axis=1) * tgt / sdo
    b = -mo + np.where(np.arange(18) < 9, 0.0, b)
    for _ in range(4):
        W["hift.conv_post.weight"] = w.astype(np.float32)
        W["hift.conv_post.bias"] = b.astype(np.float32)
        y = post(W, x)
        rms = float(np.sqrt(np.mean(y ** 2)))
        b[:9] += np.log(target_rms / max(rms, 1e-9))
    W["hift.conv_post.bias"] = b.astype(np.float32)
    y = post(W, x)
    stats = dict(rms=float(np.sqrt(np.mean(y ** 2))), clipped=float(np.mean(np.abs(y) >= 0.99)),
                 f0_median=float(np.median(f0)), voiced=float(np.mean(f0 > 10)))
    log("hift calibration (%d frames): f0 median %.1f Hz, voiced %.0f%%, wav rms %.3f, clipped %.2f%%"
        % (frames, stats["f0_median"], 100 * stats["voiced"], stats["rms"], 100 * stats["clipped"]))
    return stats


# ----------------------------------------------------------------------------------------------
# voice file

def write_voice(path, seed, n_tokens=50, prompt_text=DEMO_PROMPT_TEXT):
    rng = np.random.default_rng([seed, 0x766F])
    w = gw.Writer()
    w.add_string("general.architecture", "cosyvoice3-voice")
    w.add_u32("cosyvoice.voice.format_version", 1)
    w.add_string("cosyvoice.voice.prompt_text", prompt_text)
    w.add_tensor("voice.speech_tokens", rng.integers(0, convert.SPEECH_TOKENS, n_tokens).astype(np.int32),
                 gw.GGML_I32)
    w.add_tensor("voice.mel", demo_mel(rng, 2 * n_tokens), gw.GGML_F32)
    w.add_tensor("voice.speaker_embedding", rng.standard_normal(convert.SPK_DIM).astype(np.float32),
                 gw.GGML_F32)
    w.write(path)


# ----------------------------------------------------------------------------------------------

# front end: the speech tokenizer v3 and CAM++ (python/cosyvoice/convert/frontend.py), as state dicts
FRONTENDS = {
    "full": dict(s3_state=1280, s3_layers=12, cam_init=128, cam_growth=32, cam_bn=128),
    "small": dict(s3_state=128, s3_layers=2, cam_init=16, cam_growth=4, cam_bn=16),
}


def frontend_state_dicts(kind, seed):
    """Random S3TokenizerV3 and CAMPPlus state dicts of the geometry FRONTENDS[kind] (numpy).
    Fill: Linear / Conv N(0, 1/sqrt(fan_in)) (CAM++ convs sqrt(2/fan_in)), biases N(0, 0.05),
    LayerNorm N(1, 0.1) / N(0, 0.05), FSMN taps N(0, 1/sqrt(K)), project_down x3 (tokens spread
    over all 6561 codes); BatchNorm gamma N(1, 0.1), beta N(0, 0.1), running mean N(0, 0.1),
    running var U(0.5, 1.5)."""
    g = FRONTENDS[kind]
    rng = np.random.default_rng([seed, 0xF0E0])

    def nrm(shape, std, mean=0.0):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std) + np.float32(mean))

    def lin(shape, gain=1.0):
        return nrm(shape, gain / np.sqrt(int(np.prod(shape[1:]))))
    S, L = g["s3_state"], g["s3_layers"]
    s3 = {"encoder.conv1.weight": lin((S, 128, 3)), "encoder.conv1.bias": nrm((S,), 0.05),
          "encoder.conv2.weight": lin((S, S, 3)), "encoder.conv2.bias": nrm((S,), 0.05)}
    for i in range(L):
        p = f"encoder.blocks.{i}."
        for ln in ("attn_ln", "mlp_ln"):
            s3[p + ln + ".weight"] = nrm((S,), 0.1, 1.0)
            s3[p + ln + ".bias"] = nrm((S,), 0.05)
        for nm in ("query", "key", "value", "out"):
            s3[p + f"attn.{nm}.weight"] = lin((S, S))
            if nm != "key":
                s3[p + f"attn.{nm}.bias"] = nrm((S,), 0.05)
        s3[p + "attn.fsmn_block.weight"] = nrm((S, 1, 31), 1 / np.sqrt(31))
        s3[p + "mlp.0.weight"], s3[p + "mlp.0.bias"] = lin((4 * S, S)), nrm((4 * S,), 0.05)
        s3[p + "mlp.2.weight"], s3[p + "mlp.2.bias"] = lin((S, 4 * S)), nrm((S,), 0.05)
    s3["quantizer._codebook.project_down.weight"] = lin((8, S), 3.0)
    s3["quantizer._codebook.project_down.bias"] = nrm((8,), 0.05)

    cam = {}

    def conv(name, shape, bias=False):
        cam[name + ".weight"] = lin(shape, np.sqrt(2.0))
        if bias:
            cam[name + ".bias"] = nrm((shape[0],), 0.05)

    def bn(name, n, affine=True):
        if affine:
            cam[name + ".weight"], cam[name + ".bias"] = nrm((n,), 0.1, 1.0), nrm((n,), 0.1)
        cam[name + ".running_mean"] = nrm((n,), 0.1)
        cam[name + ".running_var"] = (0.5 + rng.random(n)).astype(np.float32)
    M, C0, G, Bn = 32, g["cam_init"], g["cam_growth"], g["cam_bn"]
    conv("head.conv1", (M, 1, 3, 3))
    bn("head.bn1", M)
    for lay in (1, 2):
        for j in (0, 1):
            p = f"head.layer{lay}.{j}."
            conv(p + "conv1", (M, M, 3, 3))
            bn(p + "bn1", M)
            conv(p + "conv2", (M, M, 3, 3))
            bn(p + "bn2", M)
            if j == 0:
                conv(p + "shortcut.0", (M, M, 1, 1))
                bn(p + "shortcut.1", M)
    conv("head.conv2", (M, M, 3, 3))
    bn("head.bn2", M)
    conv("xvector.tdnn.linear", (C0, M * 10, 5))
    bn("xvector.tdnn.nonlinear.batchnorm", C0)
    C = C0
    for b, n in enumerate((12, 24, 16), 1):
        for j in range(1, n + 1):
            p = f"xvector.block{b}.tdnnd{j}."
            cin = C + (j - 1) * G
            bn(p + "nonlinear1.batchnorm", cin)
            conv(p + "linear1", (Bn, cin, 1))
            bn(p + "nonlinear2.batchnorm", Bn)
            conv(p + "cam_layer.linear_local", (G, Bn, 3))
            conv(p + "cam_layer.linear1", (Bn // 2, Bn, 1), bias=True)
            conv(p + "cam_layer.linear2", (G, Bn // 2, 1), bias=True)
        C += n * G
        bn(f"xvector.transit{b}.nonlinear.batchnorm", C)
        conv(f"xvector.transit{b}.linear", (C // 2, C, 1))
        C //= 2
    bn("xvector.out_nonlinear.batchnorm", C)
    conv("xvector.dense.linear", (192, 2 * C, 1))
    bn("xvector.dense.nonlinear.batchnorm", 192, affine=False)
    return s3, cam


def make_model(preset, out, seed=0, dtype="bf16", tok_dir=None, added=None, name=None, log=print,
               wetext_dir=None, text=True, frontend=None):
    g = dict(PRESETS[preset])
    if preset == "demo":
        tok = demo_tokenizer()
        g["text_vocab"] = (len(tok[0]) + 63) // 64 * 64
        log(f"demo tokenizer: {len(tok[0])} tokens ({len(tok[2])} merges), text vocab {g['text_vocab']}")
    else:
        tok_dir = tok_dir or default_tokenizer_dir()
        if os.path.isdir(tok_dir):
            added = added or os.path.join(tok_dir, "added_tokens.json")
            tok = convert.load_tokenizer(tok_dir, added)
        elif preset == "small":
            log(f"note: no tokenizer at {tok_dir}: using the demo tokenizer")
            tok = demo_tokenizer()
        else:
            raise convert.ConvertError(f"tokenizer directory {tok_dir} not found (--tokenizer)")
    f = Filler(seed)
    llm, hp_llm = convert.map_llm(llm_checkpoint(g, f))
    flow, hp_flow = convert.map_flow(flow_checkpoint(g, f))
    hift, hp_hift, hp_hift_a = convert.map_hift(hift_checkpoint(g, f))
    calibrate_hift(hift, seed, log=log)
    tensors = {**llm, **flow, **hift}
    front = None
    if frontend:
        s3, cam = frontend_state_dicts(frontend, seed)
        front = convert.frontend_dict(convert.fe.s3tok_from_state_dict(s3, "random speech tokenizer"),
                                      convert.fe.campplus_from_state_dict(cam, "random CAM++"))
        log(f"front end ({frontend}): {len(front['tensors'])} tensors")
    convert.write_model(out, tensors, hp_llm, hp_flow, hp_hift, hp_hift_a, tok, dtype,
                        name or f"random-{preset} (seed {seed})",
                        text=convert.text_grammars(wetext_dir, text, log), frontend=front)
    return len(tensors) + 1 + (len(front["tensors"]) if front else 0)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("-o", "--output", required=True, help="model file to write (.gguf)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=sorted(convert.DTYPES), default="bf16",
                    help="storage type of the LLM and flow matrices (default bf16; HiFT stays f32)")
    ap.add_argument("--tokenizer", help="tokenizer directory for full/small (default "
                    "$COSY_SHARED/tokenizer, else ../shared/tokenizer)")
    ap.add_argument("--added-tokens", help="CosyVoice3 special tokens (default DIR/added_tokens.json)")
    ap.add_argument("--name", help="general.name (default random-PRESET (seed N))")
    ap.add_argument("--voice", help="also write a demo voice file here")
    ap.add_argument("--wetext", metavar="DIR", help="fsts/ directory of a wetext wheel (default: "
                    "the installed wetext package; docs/model-format.md section 9)")
    ap.add_argument("--no-text-grammars", action="store_true",
                    help="write no text normalization grammars")
    ap.add_argument("--frontend", choices=["none", "small", "full", "preset"], default="none",
                    help="also random front-end models (speech tokenizer v3 + CAM++, for "
                    "cosy_voice_from_audio): full = the real geometry, small = the test geometry, "
                    "preset = full for --preset full, else small (default none)")
    a = ap.parse_args(argv)
    t0 = time.time()
    fe_kind = None if a.frontend == "none" else a.frontend if a.frontend != "preset" else \
        ("full" if a.preset == "full" else "small")
    try:
        n = make_model(a.preset, a.output, a.seed, a.dtype, a.tokenizer, a.added_tokens, a.name,
                       wetext_dir=a.wetext, text=not a.no_text_grammars, frontend=fe_kind)
    except (convert.ConvertError, OSError) as exc:
        print(f"make_model.py: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {a.output}: {n} tensors, weights {a.dtype}, {os.path.getsize(a.output) / 1e6:.1f} MB, "
          f"{time.time() - t0:.1f} s")
    if a.voice:
        write_voice(a.voice, a.seed)
        print(f"wrote {a.voice}: demo voice (50 prompt tokens, 100 mel frames)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
