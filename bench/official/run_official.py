#!/usr/bin/env python3
"""Workload W1 at concurrency 1 on the OFFICIAL CosyVoice3 PyTorch modules (the baseline).

    python3 bench/official/run_official.py --model DIR --shared SHARED [--device cuda|cpu] [--fp16]
        [--requests 8] [--warmup 2] [--tokens 112] [--modes shipped,nopoll] [--out FILE.json]
        [--official .dev/official] [--check-golden]

DIR is what bench/official/export_pt.py wrote from one of our model files (llm.pt, flow.pt,
hift.pt, CosyVoice-BlankEN/config.json, geometry.json), so the official code runs with exactly
the weights our benchmark model has; --model may also name the .gguf itself, which is then
exported in memory by the same code (no .pt files written). The official source is imported from --official (default
.dev/official, holding upstream's cosyvoice/ package; never committed). The models are built
directly, without the yaml: Qwen2Encoder (its Qwen2ForCausalLM
built from the config instead of from_pretrained) -> CosyVoice3LM -> PreLookaheadLayer -> DiT ->
CausalConditionalCFM -> CausalMaskedDiffWithDiT -> CausalConvRNNF0Predictor ->
CausalHiFTGenerator, then load_state_dict(strict=True), eval(), .to(device); fp32 as the official
default (--fp16: the official fp16 flag, i.e. torch.cuda.amp.autocast around LLM, flow, HiFT).

Dependencies the official modules import but that are not needed to run them are replaced by
small stand-ins written here for imports the three models do not use: omegaconf.DictConfig (a dict with attribute
access), matcha...flow_matching.BASECFM (an nn.Module storing n_feats, n_spks, spk_emb_dim,
solver, sigma_min), x_transformers.x_transformers.{RotaryEmbedding, apply_rotary_pos_emb}
(interleaved rotary embedding applied to the first rot_dim channels, autocast off; the real
x-transformers is used when installed), and, only when they are not installed, torchaudio /
onnxruntime (imported at module level but unused on this path) and einops.repeat (one pattern).

W1 (docs/scheduler.md section 6), as bench/bench_w1.c does it: the voice is the real matcha mel of
SHARED/audio/zero_shot_prompt.wav (docs/model.md section 5), 87 prompt speech tokens and a 192-d speaker
embedding drawn from the same LCG as bench_w1.c, the prompt text
"You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。"; request i says line
i of SHARED/bench/w1_texts.txt (tokenized with the real tokenizer: transformers AutoTokenizer of
SHARED/tokenizer plus the CosyVoice3 added special tokens). Every request is forced to --tokens
speech tokens: the LLM's sampling callable (RAS, top_p 0.8, top_k 25, win 10, tau_r 0.1) is
wrapped so that all stop ids (>= 6561) are masked until --tokens tokens are out, then it returns
eos (6562) — the official loop itself (prefill + HF KV-cache decode, sampling_ids, stop check,
silent-token filter) is untouched.

Two modes, both streaming with the official chunk schedule (first hop 25 + prompt_token_pad,
then 50, 100, ...; 3 look-ahead tokens; flow re-run on prompt + all tokens, HiFT re-run on the
whole mel; the final chunk with finalize=True and full attention), both through the official
CosyVoice3Model.token2wav:
  shipped  CosyVoice3Model.tts(stream=True) as shipped: llm_job in a thread on its own CUDA
           stream, the main thread polling every 100 ms (time.sleep(0.1)). The instance's
           token_hop_len, which tts() doubles and never resets (an upstream bug), is reset to 25
           before every request so that every request has the W1 schedule (--keep-hop-bug: not).
  nopoll   the same modules, sequentially in one thread: the official Qwen2LM.inference generator
           is stepped, and a chunk is made as soon as its tokens are there (no thread, no sleep).
           Per-stage times come from this mode (torch.cuda.synchronize() around each): LLM
           prefill (first step incl. its sampling), LLM per decode token (forward + sampling),
           flow per call, HiFT per call.
Per request: TTFB = submit -> first chunk with samples returned (the official code yields
`tts_speech.cpu()`, which waits for the GPU); RTF = (last chunk - submit) / audio seconds.
p50/p95 over --requests after --warmup requests (per mode), percentiles as bench_w1.c computes
them (the ceil(q n)-th smallest). A table is printed last; --out writes everything as JSON.

--check-golden: instead of the benchmark, run the official modules (on --device, should be cpu)
on the golden inputs of SHARED/golden and compare with the golden outputs; use it with a model
exported from the golden small checkpoint (tools/convert.py SHARED/golden/small). Exit status 1
if flow case (a) misses rel L2 < 1e-4.
"""
import argparse
import importlib
import importlib.machinery
import importlib.util
import json
import math
import os
import sys
import time
import types
from contextlib import nullcontext
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT_TEXT = "You are a helpful assistant.<|endofprompt|>希望你以后能够做的比我还好呦。"
N_PROMPT_TOKENS = 87
SPEECH_TOKENS = 6561
SR = 24000


# ----------------------------------------------------------------------------------------------
# stand-ins for the imports the three models do not need

def _importable(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None)   # find_spec() must not raise
    m.__dict__.update(attrs)
    sys.modules[name] = m
    if "." in name:
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, m)
    return m


class DictConfig(dict):
    """omegaconf.DictConfig as the flow uses it: a dict whose keys read as attributes."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


class BASECFM(torch.nn.Module):
    """matcha.models.components.flow_matching.BASECFM: only the attributes the subclass reads."""

    def __init__(self, n_feats, cfm_params, n_spks=1, spk_emb_dim=128):
        super().__init__()
        self.n_feats = n_feats
        self.n_spks = n_spks
        self.spk_emb_dim = spk_emb_dim
        self.solver = cfm_params.solver
        self.sigma_min = cfm_params.sigma_min if hasattr(cfm_params, "sigma_min") else 1e-4
        self.estimator = None


def _rotate_pairs(x):
    """Interleaved rotate-half: (x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)."""
    x = x.reshape(*x.shape[:-1], -1, 2)
    return torch.stack((-x[..., 1], x[..., 0]), dim=-1).reshape(*x.shape[:-2], -1)


class RotaryEmbedding(torch.nn.Module):
    """x_transformers RotaryEmbedding(dim) without xpos: a persistent inv_freq buffer
    10000^(-2i/dim); forward(positions) -> (freqs [1, n, dim] with each angle repeated twice,
    interleaved, scale 1.0), computed in fp32."""

    def __init__(self, dim, base=10000.0, interpolation_factor=1.0):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)))
        self.interpolation_factor = interpolation_factor

    def forward_from_seq_len(self, seq_len):
        return self.forward(torch.arange(seq_len, device=self.inv_freq.device))

    def forward(self, t):
        with torch.autocast(device_type=self.inv_freq.device.type, enabled=False):
            if t.ndim == 1:
                t = t[None]
            freqs = torch.einsum("bi,j->bij", t.type_as(self.inv_freq), self.inv_freq)
            freqs = freqs / self.interpolation_factor
            freqs = torch.stack((freqs, freqs), dim=-1).reshape(*freqs.shape[:-1], -1)
        return freqs, 1.0


def apply_rotary_pos_emb(t, freqs, scale=1):
    """Rotate the first freqs.shape[-1] channels of t [..., n, d] (interleaved pairs) by the
    last n rows of freqs; the other channels pass through; fp32 maths, result in t's dtype."""
    with torch.autocast(device_type=t.device.type, enabled=False):
        rot_dim, seq_len, dtype = freqs.shape[-1], t.shape[-2], t.dtype
        freqs = freqs[:, -seq_len:, :]
        if t.ndim == 4 and freqs.ndim == 3:
            freqs = freqs[:, None]
        tr, tp = t[..., :rot_dim], t[..., rot_dim:]
        tr = tr * freqs.cos() * scale + _rotate_pairs(tr) * freqs.sin() * scale
        return torch.cat((tr, tp), dim=-1).type(dtype)


def _einops_repeat(x, pattern, **axes):
    if pattern.replace(" ", "") != "bc->btc":
        raise NotImplementedError(f"einops stand-in: pattern {pattern!r}")
    return x[:, None, :].expand(x.shape[0], axes["t"], x.shape[1]).contiguous()


class _Unavailable:
    def __init__(self, *a, **k):
        raise RuntimeError("stand-in module: not available in this environment")


def install_stubs():
    import transformers  # noqa: F401  (probes torchaudio etc. itself: import it before stubbing)
    from transformers import Qwen2ForCausalLM  # noqa: F401
    used = []
    if not _importable("omegaconf"):
        _module("omegaconf", DictConfig=DictConfig)
        used.append("omegaconf")
    # Matcha-TTS is a git submodule upstream (not on PyPI): always the stand-in
    for n in ("matcha", "matcha.models", "matcha.models.components"):
        _module(n)
    _module("matcha.models.components.flow_matching", BASECFM=BASECFM)
    used.append("matcha")
    if not _importable("x_transformers"):
        _module("x_transformers")
        _module("x_transformers.x_transformers", RotaryEmbedding=RotaryEmbedding,
                apply_rotary_pos_emb=apply_rotary_pos_emb)
        used.append("x_transformers")
    if not _importable("einops"):
        _module("einops", repeat=_einops_repeat)
        used.append("einops")
    if not _importable("torchaudio"):
        _module("torchaudio", load=_Unavailable)
        _module("torchaudio.transforms", MelSpectrogram=_Unavailable, Resample=_Unavailable,
                Spectrogram=_Unavailable)
        _module("torchaudio.compliance")
        _module("torchaudio.compliance.kaldi", fbank=_Unavailable)
        used.append("torchaudio")
    if not _importable("onnxruntime"):
        _module("onnxruntime", SessionOptions=_Unavailable, InferenceSession=_Unavailable,
                GraphOptimizationLevel=types.SimpleNamespace(ORT_ENABLE_ALL=99))
        used.append("onnxruntime")
    return used


# ----------------------------------------------------------------------------------------------
# building the official models

def import_official(path):
    if not os.path.isdir(os.path.join(path, "cosyvoice")):
        sys.exit(f"run_official.py: {path}/cosyvoice not found: copy upstream's cosyvoice/ package "
                 f"there (bench/official/README.md)")
    sys.path.insert(0, os.path.abspath(path))
    os.environ.pop("onnx_path", None)         # keep online_feature off (no ONNX sessions)
    mods = {}
    for n in ("cosyvoice.llm.llm", "cosyvoice.flow.flow", "cosyvoice.flow.flow_matching",
              "cosyvoice.flow.DiT.dit", "cosyvoice.transformer.upsample_encoder",
              "cosyvoice.hifigan.generator", "cosyvoice.hifigan.f0_predictor",
              "cosyvoice.utils.common", "cosyvoice.cli.model"):
        mods[n.rsplit(".", 1)[1]] = importlib.import_module(n)
    return types.SimpleNamespace(**mods)


def load_weights(model):
    """model: a directory written by export_pt.py, or one of our .gguf files (exported in memory).
    -> (llm, flow, hift state_dicts, Qwen2 config dict, geometry dict, file noise or None)."""
    if os.path.isfile(model):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import export_pt
        e = export_pt.export(model)
        return e["llm"], e["flow"], e["hift"], e["qwen2_config"], e["geometry"], e["noise"]

    def sd(name):
        return torch.load(os.path.join(model, name), map_location="cpu", weights_only=True)

    with open(os.path.join(model, "geometry.json")) as fh:
        geo = json.load(fh)
    with open(os.path.join(model, "CosyVoice-BlankEN", "config.json")) as fh:
        qcfg = json.load(fh)
    noise = sd("flow_noise.pt") if os.path.exists(os.path.join(model, "flow_noise.pt")) else None
    return sd("llm.pt"), sd("flow.pt"), sd("hift.pt"), qcfg, geo, noise


def build_models(off, model):
    """The three official modules, constructed in the yaml's order, weights loaded strictly."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    sd_llm, sd_flow, sd_hift, qcfg, geo, noise = load_weights(model)
    lh, fh_, hh = geo["llm"], geo["flow"], geo["hift"]

    enc = off.llm.Qwen2Encoder.__new__(off.llm.Qwen2Encoder)   # __init__ would from_pretrained
    torch.nn.Module.__init__(enc)
    enc.model = Qwen2ForCausalLM(Qwen2Config(**qcfg))
    ras = partial(off.common.ras_sampling, top_p=0.8, top_k=25, win_size=10, tau_r=0.1)
    llm = off.llm.CosyVoice3LM(lh["hidden_size"], lh["hidden_size"], lh["speech_token_size"], enc,
                               ras, True, 0, [5, 15])
    pre = off.upsample_encoder.PreLookaheadLayer(in_channels=80, channels=fh_["pre_channels"],
                                                 pre_lookahead_len=fh_["pre_lookahead_len"])
    dim = fh_["dit_dim"]
    dit = off.dit.DiT(dim=dim, depth=fh_["dit_depth"], heads=fh_["dit_heads"],
                      dim_head=fh_["dit_head_dim"], ff_mult=fh_["dit_ff_dim"] // dim, mel_dim=80,
                      mu_dim=80, spk_dim=80, out_channels=80,
                      static_chunk_size=fh_["static_chunk_size"], num_decoding_left_chunks=-1)
    cfm_params = DictConfig(sigma_min=1e-06, solver="euler", t_scheduler="cosine",
                            training_cfg_rate=0.2, inference_cfg_rate=0.7, reg_loss_type="l1")
    cfm = off.flow_matching.CausalConditionalCFM(in_channels=240, cfm_params=cfm_params, n_spks=1,
                                                 spk_emb_dim=80, estimator=dit)
    flow = off.flow.CausalMaskedDiffWithDiT(
        input_size=80, output_size=80, spk_embed_dim=192, output_type="mel",
        vocab_size=fh_["vocab_size"], input_frame_rate=25, only_mask_loss=True,
        token_mel_ratio=fh_["token_mel_ratio"], pre_lookahead_len=fh_["pre_lookahead_len"],
        pre_lookahead_layer=pre, decoder=cfm)
    f0 = off.f0_predictor.CausalConvRNNF0Predictor(num_class=1, in_channels=80,
                                                   cond_channels=hh["cond_channels"])
    hift = off.generator.CausalHiFTGenerator(
        in_channels=80, base_channels=hh["base_channels"], nb_harmonics=hh["nb_harmonics"],
        sampling_rate=hh["sample_rate"], nsf_alpha=0.1, nsf_sigma=0.003, nsf_voiced_threshold=10,
        upsample_rates=[8, 5, 3], upsample_kernel_sizes=hh["upsample_kernel_sizes"],
        istft_params={"n_fft": hh["istft_n_fft"], "hop_len": hh["istft_hop"]},
        resblock_kernel_sizes=[3, 7, 11], resblock_dilation_sizes=[[1, 3, 5]] * 3,
        source_resblock_kernel_sizes=[7, 7, 11], source_resblock_dilation_sizes=[[1, 3, 5]] * 3,
        lrelu_slope=0.1, audio_limit=0.99, conv_pre_look_right=hh["conv_pre_look_right"],
        f0_predictor=f0)

    llm.load_state_dict(sd_llm, strict=True)          # as CosyVoice3Model.load does
    flow.load_state_dict(sd_flow, strict=True)
    hift.load_state_dict({k.replace("generator.", ""): v for k, v in sd_hift.items()}, strict=True)
    noise_diff = None if noise is None else float((cfm.rand_noise - noise).abs().max())
    return llm.eval(), flow.eval(), hift.eval(), geo, noise_diff


# ----------------------------------------------------------------------------------------------
# inputs

def read_wav(path):
    from scipy.io import wavfile
    sr, a = wavfile.read(path)
    if a.dtype == np.int16:
        a = a.astype(np.float32) / 32768.0
    elif a.dtype == np.int32:
        a = a.astype(np.float32) / 2147483648.0
    a = a.astype(np.float32)
    if a.ndim == 2:
        a = a.mean(axis=1)
    return a, sr


def slaney_mel_fb(sr=24000, n_fft=1920, n_mels=80, fmin=0.0, fmax=None):
    """librosa.filters.mel(sr, n_fft, n_mels) (slaney scale, slaney norm): float64 maths,
    float32 result. Shape [n_mels, 1 + n_fft // 2]."""
    fmax = sr / 2 if fmax is None else fmax
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, math.log(6.4) / 27.0

    def hz_to_mel(f):
        return f / f_sp if f < min_log_hz else min_log_mel + math.log(f / min_log_hz) / logstep

    def mel_to_hz(m):
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    fftfreqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fftfreqs[None, :]
    w = np.zeros((n_mels, len(fftfreqs)))
    for i in range(n_mels):
        w[i] = np.maximum(0, np.minimum(-ramps[i] / fdiff[i], ramps[i + 2] / fdiff[i + 1]))
    w *= (2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels]))[:, None]
    return w.astype(np.float32)


def matcha_mel(wav):
    """The flow's prompt mel (docs/model.md section 5): reflect-pad 720, |STFT| (n_fft 1920, hop 480, periodic
    hann, center False) with +1e-9 under the root, slaney mel, natural log clamped at 1e-5.
    wav: float32 [N] at 24 kHz -> [1, T, 80]."""
    y = torch.from_numpy(wav)[None, None]
    y = F.pad(y, (720, 720), mode="reflect")[:, 0]
    spec = torch.stft(y, 1920, hop_length=480, win_length=1920, window=torch.hann_window(1920),
                      center=False, normalized=False, onesided=True, return_complex=True)
    spec = torch.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
    mel = torch.matmul(torch.from_numpy(slaney_mel_fb()), spec)
    return torch.log(torch.clamp(mel, min=1e-5)).transpose(1, 2).contiguous()


def lcg_voice(n_tokens=N_PROMPT_TOKENS, n_spk=192):
    """The prompt speech tokens and speaker embedding of bench/bench_w1.c (same LCG, same order)."""
    mask = (1 << 64) - 1
    x = 0x9E3779B97F4A7C15
    tok, spk = [], []
    for _ in range(n_tokens):
        x = (x * 6364136223846793005 + 1442695040888963407) & mask
        tok.append((x >> 33) % 6561)
    for _ in range(n_spk):
        x = (x * 6364136223846793005 + 1442695040888963407) & mask
        spk.append(float(np.float32((x >> 11) / 9007199254740992.0 * 2.0 - 1.0)))
    return tok, spk


def load_tokenizer(tok_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tok_dir)
    with open(os.path.join(tok_dir, "added_tokens.json"), encoding="utf-8") as fh:
        added = json.load(fh)
    lst = [d["content"] if isinstance(d, dict) else d for d in added["additional_special_tokens"]]
    tok.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                            "additional_special_tokens": lst})
    return lambda text: tok([text])["input_ids"][0]     # = CosyVoice3Tokenizer.encode


# ----------------------------------------------------------------------------------------------
# timing helpers

class Sync:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __call__(self):
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()


def pct(v, q):
    """bench_w1.c's percentile: the ceil(q n)-th smallest value."""
    if not v:
        return float("nan")
    s = sorted(v)
    return s[max(0, int(math.ceil(q * len(s))) - 1)]


def summary(v):
    return {"n": len(v), "mean": float(np.mean(v)) if v else float("nan"), "p50": pct(v, 0.5),
            "p95": pct(v, 0.95), "min": min(v) if v else float("nan")}


def forced_sampler(ras, n_tokens, stop_from=SPEECH_TOKENS):
    """Wrap the official sampling callable: stop ids masked until n_tokens tokens are out, then
    eos (a stop id, which ends the official loop)."""
    def sampling(weighted_scores, decoded_tokens, sampling):
        if len(decoded_tokens) >= n_tokens:
            return stop_from + 1
        weighted_scores[stop_from:] = -float("inf")
        return ras(weighted_scores, decoded_tokens, sampling)
    return sampling


# ----------------------------------------------------------------------------------------------
# the two modes

def run_shipped(model, req, n_tokens, keep_hop_bug):
    """CosyVoice3Model.tts(stream=True) as shipped (llm thread + 100 ms polling)."""
    if not keep_hop_bug:
        model.token_hop_len = 25
    chunks = []
    t0 = time.perf_counter()
    for out in model.tts(text=req["text"], flow_embedding=req["spk"], llm_embedding=req["spk"],
                         prompt_text=req["prompt_text"], llm_prompt_speech_token=req["ptok"],
                         flow_prompt_speech_token=req["ptok"], prompt_speech_feat=req["feat"],
                         stream=True):
        chunks.append((time.perf_counter() - t0, int(out["tts_speech"].shape[1])))
    return chunks, {}


def run_nopoll(model, req, n_tokens, sync, stages):
    """The same modules and chunk schedule, one thread, a chunk as soon as its tokens exist."""
    llm, flow = model.llm, model.flow
    dev = model.device
    uuid = "nopoll"
    model.hift_cache_dict[uuid] = None
    ptok, P = req["ptok"], req["ptok"].shape[1]
    pad = int(np.ceil(P / 25) * 25 - P)
    hop, offset, tokens, chunks = 25, 0, [], []
    silent, run_silent = model.silent_tokens, 0
    step_t = []

    def chunk(finalize):
        nonlocal offset, hop
        this_hop = hop + pad if offset == 0 else hop
        if finalize:
            tt = torch.tensor(tokens)[None]
            speech = model.token2wav(token=tt, prompt_token=ptok, prompt_feat=req["feat"],
                                     embedding=req["spk"], token_offset=offset, uuid=uuid,
                                     finalize=True)
        else:
            tt = torch.tensor(tokens[:offset + this_hop + flow.pre_lookahead_len])[None]
            speech = model.token2wav(token=tt, prompt_token=ptok, prompt_feat=req["feat"],
                                     embedding=req["spk"], token_offset=offset, uuid=uuid,
                                     stream=True, finalize=False)
            offset += this_hop
            hop = min(model.token_max_hop_len, hop * model.stream_scale_factor)
        n = int(speech.cpu().shape[1])
        chunks.append((time.perf_counter() - t0, n))

    def ready():
        this_hop = hop + pad if offset == 0 else hop
        return len(tokens) - offset >= this_hop + flow.pre_lookahead_len

    t0 = sync()
    amp = torch.cuda.amp.autocast(model.fp16 is True) if dev.type == "cuda" else nullcontext()
    with amp:
        gen = llm.inference(text=req["text"].to(dev),
                            text_len=torch.tensor([req["text"].shape[1]], dtype=torch.int32).to(dev),
                            prompt_text=req["prompt_text"].to(dev),
                            prompt_text_len=torch.tensor([req["prompt_text"].shape[1]],
                                                         dtype=torch.int32).to(dev),
                            prompt_speech_token=ptok.to(dev),
                            prompt_speech_token_len=torch.tensor([P], dtype=torch.int32).to(dev),
                            embedding=req["spk"].to(dev), uuid=uuid)
        t_prev = t0
        for tok in gen:
            t = sync()
            step_t.append(t - t_prev)
            if tok in silent:                       # CosyVoiceModel.llm_job's silent filter
                run_silent += 1
                if run_silent > 5:
                    t_prev = sync()
                    continue
            else:
                run_silent = 0
            tokens.append(tok)
            if ready():
                chunk(False)
            t_prev = sync()
    while ready():
        chunk(False)
    chunk(True)
    model.hift_cache_dict.pop(uuid, None)
    stages["llm_prefill_s"].append(step_t[0])
    stages["llm_token_s"].extend(step_t[1:])
    return chunks, {"llm_steps": len(step_t), "tokens_to_flow": len(tokens)}


def timed(fn, sync, sink, key):
    def wrapper(*a, **k):
        t = sync()
        out = fn(*a, **k)
        sink.append({"s": sync() - t, **key(*a, **k)})
        return out
    return wrapper


# ----------------------------------------------------------------------------------------------
# golden check (export faithfulness)

def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check_golden(llm, flow, hift, shared, encode, noise_diff):
    gd = os.path.join(shared, "golden")

    def L(p):
        return np.load(os.path.join(gd, p))

    res = {}
    texts = json.load(open(os.path.join(gd, "inputs", "texts.json"), encoding="utf-8"))
    res["tokenizer_prompt_ids_equal"] = encode(texts["prompt_text"]) == L("inputs/prompt_text_ids.npy").tolist()
    res["tokenizer_tts_ids_equal"] = encode(texts["tts_text"]) == L("inputs/tts_text_ids.npy").tolist()
    wav, sr = read_wav(os.path.join(shared, "audio", "zero_shot_prompt.wav"))
    res["mel_fb_24k_max_abs"] = float(np.abs(slaney_mel_fb() - L("frontend/mel_fb_24k.npy")).max())
    res["prompt_mel_max_abs"] = float(np.abs(matcha_mel(wav).numpy() - L("frontend/mel24k.npy")).max())
    res["flow_noise_vs_file_max_abs"] = noise_diff
    ptok = torch.from_numpy(L("inputs/prompt_speech_tokens.npy")).long()[None]
    ftok = torch.from_numpy(L("inputs/flow_tokens.npy")).long()[None]
    feat = torch.from_numpy(L("inputs/prompt_feat.npy"))
    spk = torch.from_numpy(L("inputs/spk_embedding.npy"))
    with torch.inference_mode():
        for case, tok, streaming, finalize in (("a", ftok, False, True), ("b", ftok, True, True),
                                               ("c", ftok[:, :43], True, False)):
            mel, _ = flow.inference(token=tok, token_len=torch.tensor([tok.shape[1]]),
                                    prompt_token=ptok, prompt_token_len=torch.tensor([ptok.shape[1]]),
                                    prompt_feat=feat, prompt_feat_len=torch.tensor([feat.shape[1]]),
                                    embedding=spk, streaming=streaming, finalize=finalize)
            res[f"flow_{case}_mel_rel_l2"] = rel_l2(mel[0].numpy(), L(f"flow/{case}/mel.npy"))
        # LLM: lm_input as Qwen2LM.inference builds it, then the official prefill
        text = torch.tensor([L("inputs/prompt_text_ids.npy").tolist() + L("inputs/tts_text_ids.npy").tolist()])
        emb = llm.llm.model.model.embed_tokens(text)
        se = llm.speech_embedding.weight
        lm_input = torch.cat([se[llm.sos][None, None], emb, se[llm.task_id][None, None],
                              llm.speech_embedding(ptok)], dim=1)
        res["llm_lm_input_rel_l2"] = rel_l2(lm_input[0].numpy(), L("llm/lm_input.npy"))
        n = lm_input.shape[1]
        y, _ = llm.llm.forward_one_step(lm_input, masks=torch.tril(torch.ones((1, n, n))).bool())
        logp = llm.llm_decoder(y[0]).log_softmax(-1)
        res["llm_prefill_logp_max_abs"] = float(np.abs(logp.numpy() - L("llm/prefill_logp.npy")).max())
        # HiFT: fixed buffers, the decode path alone (golden s injected), the whole inference
        gen = hift.m_source.l_sin_gen
        res["hift_rand_ini_max_abs"] = float(np.abs(gen.rand_ini.reshape(-1).numpy() - L("hift/rand_ini.npy")).max())
        mel_in = torch.from_numpy(L("hift/mel_in.npy"))[None]
        s = torch.from_numpy(L("hift/final/s.npy")).reshape(1, 1, -1)
        wav_d = hift.decode(x=mel_in, s=s, finalize=True)
        res["hift_decode_given_s_wav_max_abs"] = float(np.abs(wav_d[0].numpy() - L("hift/final/wav.npy")).max())
        wav_f, s_f = hift.inference(speech_feat=mel_in, finalize=True)
        res["hift_final_s_max_abs"] = float(np.abs(s_f.reshape(-1).numpy() - L("hift/final/s.npy")).max())
        res["hift_final_wav_max_abs"] = float(np.abs(wav_f[0].numpy() - L("hift/final/wav.npy")).max())
    ok = res["flow_a_mel_rel_l2"] < 1e-4
    res["pass_flow_a_rel_l2_lt_1e-4"] = ok
    return res, ok


# ----------------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True,
                    help="directory written by export_pt.py, or one of our .gguf model files")
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(REPO), "shared"))
    ap.add_argument("--official", default=os.path.join(REPO, ".dev", "official"),
                    help="directory holding upstream's cosyvoice/ package")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--fp16", action="store_true", help="the official fp16 flag (autocast)")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=112)
    ap.add_argument("--modes", default="shipped,nopoll")
    ap.add_argument("--keep-hop-bug", action="store_true",
                    help="shipped mode: do not reset token_hop_len to 25 between requests")
    ap.add_argument("--texts", help="default SHARED/bench/w1_texts.txt")
    ap.add_argument("--prompt-wav", help="default SHARED/audio/zero_shot_prompt.wav")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    ap.add_argument("--check-golden", action="store_true")
    ap.add_argument("--out", help="write the results here as JSON")
    a = ap.parse_args(argv)

    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    stubs = install_stubs()
    off = import_official(a.official)
    t = time.perf_counter()
    llm, flow, hift, geo, noise_diff = build_models(off, a.model)
    t_build = time.perf_counter() - t
    encode = load_tokenizer(os.path.join(a.shared, "tokenizer"))
    print(f"run_official: built and loaded the official modules in {t_build:.1f} s (stand-ins: "
          f"{', '.join(stubs)}); flow noise vs model file: max|diff| {noise_diff}", flush=True)

    if a.check_golden:
        res, ok = check_golden(llm, flow, hift, a.shared, encode, noise_diff)
        for k, v in res.items():
            print(f"  {k:40s} {v}")
        if a.out:
            with open(a.out, "w") as fh:
                json.dump(res, fh, indent=2)
        return 0 if ok else 1

    llm.to(device)
    flow.to(device)
    hift.to(device)
    model = off.model.CosyVoice3Model(llm, flow, hift, fp16=a.fp16)
    model.device = device
    if device.type != "cuda":
        model.llm_context = nullcontext()
    llm.sampling = forced_sampler(llm.sampling, a.tokens)

    # the voice and the texts
    wav, sr = read_wav(a.prompt_wav or os.path.join(a.shared, "audio", "zero_shot_prompt.wav"))
    if sr != SR:
        sys.exit(f"run_official.py: the prompt wav must be {SR} Hz (got {sr})")
    mel = matcha_mel(wav)
    ptl = min(mel.shape[1] // 2, N_PROMPT_TOKENS)
    ptok_l, spk_l = lcg_voice()
    ptok = torch.tensor(ptok_l[:ptl], dtype=torch.int32)[None]
    feat = mel[:, :2 * ptl]
    spk = torch.tensor(spk_l, dtype=torch.float32)[None]
    prompt_ids = torch.tensor(encode(PROMPT_TEXT), dtype=torch.int32)[None]
    with open(a.texts or os.path.join(a.shared, "bench", "w1_texts.txt"), encoding="utf-8") as fh:
        texts = [ln.strip() for ln in fh if ln.strip()]
    pad = int(np.ceil(ptl / 25) * 25 - ptl)

    def request(i):
        ids = encode(texts[i % len(texts)])
        if len(ids) * 20 < a.tokens:
            sys.exit(f"run_official.py: text {i} has {len(ids)} tokens: max_len {20 * len(ids)} < "
                     f"{a.tokens}")
        return {"text": torch.tensor(ids, dtype=torch.int32)[None], "prompt_text": prompt_ids,
                "ptok": ptok, "feat": feat, "spk": spk, "chars": len(texts[i % len(texts)])}

    sync = Sync(device)
    dev_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    import transformers
    result = {"device": dev_name, "torch": torch.__version__, "transformers": transformers.__version__,
              "fp16": a.fp16, "tokens": a.tokens, "prompt_tokens": ptl, "prompt_mel_frames": 2 * ptl,
              "prompt_text_ids": len(encode(PROMPT_TEXT)), "prompt_token_pad": pad,
              "model": geo.get("source"), "model_name": geo.get("name"),
              "model_weight_dtype": geo.get("weight_dtype"), "stand_ins": stubs,
              "tf32": {"matmul": torch.backends.cuda.matmul.allow_tf32,
                       "cudnn": torch.backends.cudnn.allow_tf32},
              "official_commit": open(os.path.join(a.official, "UPSTREAM_COMMIT")).read().strip()
              if os.path.exists(os.path.join(a.official, "UPSTREAM_COMMIT")) else None,
              "keep_hop_bug": a.keep_hop_bug, "modes": {}}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)

    for mode in [m.strip() for m in a.modes.split(",") if m.strip()]:
        if mode not in ("shipped", "nopoll"):
            sys.exit(f"run_official.py: unknown mode {mode}")
        reqs = []
        stages = {"llm_prefill_s": [], "llm_token_s": [], "flow": [], "hift": []}
        orig_flow, orig_hift = flow.inference, hift.inference     # bound methods
        for r in range(a.warmup + a.requests):
            warm = r < a.warmup       # measured request j says line j, as bench_w1.c does
            req = request(a.requests + r if warm else r - a.warmup)
            st = {"llm_prefill_s": [], "llm_token_s": [], "flow": [], "hift": []}
            if mode == "nopoll":
                flow.inference = timed(orig_flow, sync, st["flow"], lambda *x, **k: {
                    "tokens": int(k["token"].shape[1] + k["prompt_token"].shape[1]),
                    "streaming": bool(k["streaming"]), "finalize": bool(k["finalize"])})
                hift.inference = timed(orig_hift, sync, st["hift"], lambda *x, **k: {
                    "frames": int(k["speech_feat"].shape[2]), "finalize": bool(k["finalize"])})
                try:
                    chunks, extra = run_nopoll(model, req, a.tokens, sync, st)
                finally:
                    del flow.inference, hift.inference      # back to the class methods
            else:
                chunks, extra = run_shipped(model, req, a.tokens, a.keep_hop_bug)
            samples = sum(n for _, n in chunks)
            audio = samples / SR
            first = next((t for t, n in chunks if n > 0), float("nan"))
            rec = {"ttfb_s": first, "rtf": chunks[-1][0] / audio if audio else float("nan"),
                   "audio_s": audio, "wall_s": chunks[-1][0], "chars": req["chars"],
                   "chunks": [{"t_s": t, "samples": n} for t, n in chunks], **extra}
            if mode == "nopoll":
                rec["stages"] = st
            tag = "warm-up" if warm else f"{r - a.warmup + 1}/{a.requests}"
            print(f"  {mode:8s} {tag:8s} ttfb {1e3 * first:8.1f} ms  rtf {rec['rtf']:.4f}  audio "
                  f"{audio:.2f} s  chunks {len(chunks)}", flush=True)
            if warm:
                continue
            reqs.append(rec)
            for k in stages:
                stages[k].extend(st[k])
        tt = [q["ttfb_s"] for q in reqs]
        rt = [q["rtf"] for q in reqs]
        m = {"requests": reqs, "ttfb_s": summary(tt), "rtf": summary(rt),
             "xrt": sum(q["audio_s"] for q in reqs) / sum(q["wall_s"] for q in reqs)}
        if mode == "nopoll":
            calls = {}
            for c in stages["flow"]:
                calls.setdefault(("flow", c["tokens"], c["finalize"]), []).append(c["s"])
            for c in stages["hift"]:
                calls.setdefault(("hift", c["frames"], c["finalize"]), []).append(c["s"])
            m["stages"] = {
                "llm_prefill_s": summary(stages["llm_prefill_s"]),
                "llm_token_s": summary(stages["llm_token_s"]),
                "flow_call_s": summary([c["s"] for c in stages["flow"]]),
                "hift_call_s": summary([c["s"] for c in stages["hift"]]),
                "by_call": [{"stage": s, "size": n, "finalize": f, **summary(v),
                             "size_is": "prompt+chunk tokens" if s == "flow" else "mel frames"}
                            for (s, n, f), v in sorted(calls.items())],
            }
        result["modes"][mode] = m
    if device.type == "cuda":
        result["gpu_peak_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2 ** 20

    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as fh:
            json.dump(result, fh, indent=1)

    print(f"\nofficial CosyVoice3 ({result['official_commit'] or 'upstream'}), W1 C=1, {dev_name}, "
          f"{'fp16 autocast' if a.fp16 else 'fp32'}, {a.tokens} tokens/request, prompt {ptl} "
          f"tokens (pad {pad}), {a.requests} requests after {a.warmup} warm-up")
    for mode, m in result["modes"].items():
        if "stages" in m:
            s = m["stages"]
            print(f"  stages ({mode}): LLM prefill {1e3 * s['llm_prefill_s']['p50']:.1f} ms, "
                  f"LLM {1e3 * s['llm_token_s']['mean']:.2f} ms/token (p50 "
                  f"{1e3 * s['llm_token_s']['p50']:.2f})")
            for c in s["by_call"]:
                print(f"    {c['stage']:4s} {c['size']:4d} {c['size_is']:19s} "
                      f"{'final' if c['finalize'] else 'chunk':5s} x{c['n']:<3d} p50 "
                      f"{1e3 * c['p50']:8.1f} ms")
    print(f"{'mode':>8s} {'reqs':>5s} {'ttfb_p50':>10s} {'ttfb_p95':>10s} {'rtf_p50':>8s} "
          f"{'rtf_p95':>8s} {'xRT':>7s}")
    for mode, m in result["modes"].items():
        print(f"{mode:>8s} {len(m['requests']):5d} {1e3 * m['ttfb_s']['p50']:8.1f}ms "
              f"{1e3 * m['ttfb_s']['p95']:8.1f}ms {m['rtf']['p50']:8.4f} {m['rtf']['p95']:8.4f} "
              f"{m['xrt']:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
