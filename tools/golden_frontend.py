#!/usr/bin/env python3
"""Make the front-end golden data (tests/data/frontend/): small random-weight speech tokenizer v3
and CAM++ models, their weights as PyTorch state dicts and ONNX files, and their outputs on the
official front-end features of the zero-shot prompt.

    python tools/golden_frontend.py --campplus-src DIR [--shared ../shared] [--out tests/data/frontend]

Needs (run from an ignored folder's venv, never at library run time): torch (CPU is enough), onnx,
onnxruntime 1.18.0 (the version CosyVoice's requirements pin: it gives the expected CAM++
embeddings, see below), the PyPI package s3tokenizer 0.3.0 (S3TokenizerV3 from its model_v3.py)
and the 3D-Speaker source tree (DIR holds speakerlab/models/campplus/{DTDNN,layers}.py; not a
PyPI package). The exact command used is in tests/data/frontend/README.md.

Inputs (the official front-end features, made by the shared golden generator):
  golden/frontend/whisper_logmel.npy  [1, 128, 348]  speech-tokenizer input
  golden/frontend/kaldi_fbank_cmn.npy [346, 80]      CAM++ input (fbank minus its mean)
CAM++ cases (cam_input below): T fbank frames, frame t = kaldi_fbank_cmn[t mod 346], minus their
mean over the T frames: short 80 (0.8 s), cut250 (2.5 s), full 346 (3.5 s, the whole prompt),
long 1100 (11 s). After the tdnn (T2 = (T - 1) / 2 + 1 frames) the CAM layers pool segments of
100 frames; the last one holds 40, 25, 73 and 50 frames in these cases.

CAM++ segment pooling. 3D-Speaker's CAMLayer.seg_pooling is avg_pool1d(kernel 100, stride 100,
ceil_mode=True), exported to ONNX as AveragePool(kernel 100, strides 100, pads 0, ceil_mode 1,
count_include_pad 1). PyTorch and onnxruntime >= 1.19 average the last, partial window over the
frames it holds; onnxruntime 1.18.0, which the official front end runs, divides its sum by 100.
The expected embeddings (cam_*_embedding.npy) are campplus_small.onnx run under onnxruntime
1.18.0 (graph optimizations ORT_ENABLE_ALL, as the official frontend.py sets); the PyTorch
outputs after the first CAM layer (stats) come from the PyTorch model with seg_pooling replaced
by the divide-by-100 form (seg_pool_div_kernel), whose embedding info.json compares with
onnxruntime's. --size full exports only campplus_small.onnx (the speech tokenizer's ONNX export
is skipped there), so its expected embeddings are onnxruntime 1.18.0's too.
Models (seeded, --seed): S3TokenizerV3 with n_audio_state 128, 2 heads, 2 layers (the v3 code
path: same block class as 12 x 1280); CAM++ (CAMPPlus) with growth 4, bottleneck 16, 16 initial
channels, embedding 192 (the same dense-block layer counts 12/24/16 as the real one). Every
LayerNorm and BatchNorm is randomized (affine and running statistics); the FSQ projection is
scaled so the 8 pre-tanh values spread over all three levels.

Outputs: weights (s3tok_small.pt and campplus_small.pt with the values stored as float16 to keep
them small: the models run in float32 on float16-exact values; s3tok_small.onnx (its rotary table
cut to 256 positions, ~10 s); campplus_small.pt,
campplus_small.onnx), and per case the expected outputs (.npy): tokens, the FSQ projection before
tanh, the encoder output; the CAM++ head / tdnn outputs, pooled statistics, embedding.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

CASES_S3 = {"full": None, "cut301": 301}     # mel frames used (None = all 348)
CASES_CAM = {"short": 80, "cut250": 250, "full": 346, "long": 1100}  # fbank frames (cam_input)
# intermediate outputs kept only for the "full" cases (size)
FULL_ONLY = {"block0", "conv2_pre_gelu", "head", "tdnn"}


def f16_exact(sd):
    return {k: v.half().float() if v.is_floating_point() else v for k, v in sd.items()}


def make_s3(seed, size="small"):
    from s3tokenizer.model_v3 import ModelConfigV3, S3TokenizerV3
    torch.manual_seed(seed)
    cfg = ModelConfigV3(n_mels=128, n_audio_state=128, n_audio_head=2, n_audio_layer=2) \
        if size == "small" else ModelConfigV3()
    m = S3TokenizerV3("v3-small", cfg).eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("ln.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("ln.bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "fsmn_block" in name:
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[-1]))
            else:
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(fan_in))
        pd = m.quantizer._codebook.project_down
        pd.weight.mul_(3.0)
        sd = f16_exact(m.state_dict())
        m.load_state_dict(sd)
    return m, cfg


def run_s3(m, mel):
    """-> dict of outputs for mel [1, 128, T]."""
    T = mel.shape[-1]
    x = torch.from_numpy(mel)
    xl = torch.tensor([T], dtype=torch.int32)
    out = {}
    enc = m.encoder
    hooks = [enc.conv2.register_forward_hook(lambda mod, i, o: out.__setitem__("conv2_pre_gelu", o)),
             enc.blocks[0].register_forward_hook(lambda mod, i, o: out.__setitem__("block0", o))]
    with torch.no_grad():
        hidden, code_len = enc(x, xl)
        h = m.quantizer._codebook.project_down(hidden).float()
        codes, clen = m.quantize(x, xl)
    for hk in hooks:
        hk.remove()
    assert int(clen[0]) == hidden.shape[1] == int(code_len[0])
    return {"tokens": codes[0].numpy().astype(np.int32), "proj": h[0].numpy(),
            "encoder_out": hidden[0].numpy(), "block0": out["block0"][0].numpy(),
            "conv2_pre_gelu": out["conv2_pre_gelu"][0].numpy().T.copy()}


def seg_pool_div_kernel(self, x, seg_len=100, stype='avg'):
    """CAMLayer.seg_pooling as onnxruntime 1.18.0 computes its AveragePool (ceil_mode 1,
    count_include_pad 1, pads 0): every window's sum divided by seg_len, the partial last one too
    (zero-pad to whole windows, then plain average pooling); the means broadcast back to the
    frames as the original does."""
    assert stype == 'avg'
    T = x.shape[-1]
    n = -(-T // seg_len)
    seg = torch.nn.functional.avg_pool1d(torch.nn.functional.pad(x, (0, n * seg_len - T)),
                                         kernel_size=seg_len, stride=seg_len)
    shape = seg.shape
    return seg.unsqueeze(-1).expand(*shape, seg_len).reshape(*shape[:-1], -1)[..., :T]


def cam_input(fbank, T):
    """T frames, frame t = fbank[t mod len(fbank)], minus their mean (the official call takes the
    mean over the frames it has); the full prompt (T = len) is the golden input as it is."""
    if T == fbank.shape[0]:
        return np.ascontiguousarray(fbank, dtype=np.float32)
    x = fbank[np.arange(T) % fbank.shape[0]]
    return np.ascontiguousarray(x - x.mean(axis=0, keepdims=True), dtype=np.float32)


def make_campplus(seed, src, size="small"):
    sys.path.insert(0, src)
    from speakerlab.models.campplus.DTDNN import CAMPPlus
    torch.manual_seed(seed + 10)
    m = CAMPPlus(feat_dim=80, embedding_size=192, growth_rate=4, bn_size=4, init_channels=16).eval() \
        if size == "small" else CAMPPlus(feat_dim=80, embedding_size=192).eval()
    g = torch.Generator().manual_seed(seed + 11)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                n = mod.num_features
                mod.running_mean.copy_(0.3 * torch.randn(n, generator=g))
                mod.running_var.copy_(0.5 + torch.rand(n, generator=g))
                if mod.affine:
                    mod.weight.copy_(1 + 0.2 * torch.randn(n, generator=g))
                    mod.bias.copy_(0.2 * torch.randn(n, generator=g))
            elif isinstance(mod, (torch.nn.Conv1d, torch.nn.Conv2d)):
                fan_in = int(np.prod(mod.weight.shape[1:]))
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=g) * np.sqrt(2.0 / fan_in))
                if mod.bias is not None:
                    mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=g))
        m.load_state_dict(f16_exact(m.state_dict()))
    return m


def run_campplus(m, feat):
    x = torch.from_numpy(feat)[None]
    out = {}
    xv = m.xvector
    hooks = [m.head.register_forward_hook(lambda mod, i, o: out.__setitem__("head", o)),
             xv.tdnn.register_forward_hook(lambda mod, i, o: out.__setitem__("tdnn", o)),
             xv.stats.register_forward_hook(lambda mod, i, o: out.__setitem__("stats", o))]
    with torch.no_grad():
        emb = m(x)
    for hk in hooks:
        hk.remove()
    r = {k: v[0].numpy() for k, v in out.items()}
    r["embedding"] = emb[0].numpy()
    return r


def export_onnx(m, args, path, names, dyn):
    torch.onnx.export(m, args, path, input_names=names, output_names=["out"], dynamo=False,
                      opset_version=15, dynamic_axes=dyn, do_constant_folding=True)


def _rotary_real(xq, xk, freqs_cis):
    """s3tokenizer's apply_rotary_emb on a real [T, 64, 2] (cos, sin) table instead of the complex
    one (the ONNX exporter has no complex tensors); the same arithmetic."""
    freqs = freqs_cis
    cos = freqs[..., 0].unsqueeze(0).unsqueeze(2).to(xq.dtype)
    sin = freqs[..., 1].unsqueeze(0).unsqueeze(2).to(xq.dtype)
    D = xq.shape[-1]
    xq_r = torch.cat((-xq[..., D // 2:], xq[..., :D // 2]), dim=-1)
    xk_r = torch.cat((-xk[..., D // 2:], xk[..., :D // 2]), dim=-1)
    return xq * cos + xq_r * sin, xk * cos + xk_r * sin


class S3Onnx(torch.nn.Module):
    """The official interface: (feats [1, 128, T], feats_length [1] int32) -> tokens [1, T/4].
    For export only: the rotary table is made real (see _rotary_real)."""

    def __init__(self, m):
        super().__init__()
        import s3tokenizer.model_v2 as mv2
        mv2.apply_rotary_emb = _rotary_real
        m.encoder.freqs_cis = torch.view_as_real(m.encoder.freqs_cis[:256]).contiguous()  # 10 s
        self.m = m

    def forward(self, feats, feats_length):
        hidden, _ = self.m.encoder(feats, feats_length)
        return self.m.quantizer._codebook.encode(hidden)


def ort_sessions(s3o, camo):
    """onnxruntime sessions as the official frontend.py makes them (CPU, ORT_ENABLE_ALL); the
    expected CAM++ embeddings need the pinned 1.18.0 (see the docstring)."""
    import onnxruntime as ort
    if ort.__version__ != "1.18.0":
        sys.exit(f"onnxruntime {ort.__version__}: the golden CAM++ embeddings need 1.18.0")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    mk = lambda p: ort.InferenceSession(p, so, providers=["CPUExecutionProvider"]) if p else None
    return mk(s3o), mk(camo), ort.__version__


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--campplus-src", required=True, help="3D-Speaker source tree (speakerlab/)")
    ap.add_argument("--shared", default=os.environ.get("COSY_SHARED", "../shared"))
    ap.add_argument("--out", default="tests/data/frontend")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--size", choices=["small", "full"], default="small",
                    help="full: the real geometries (S3 1280 x 12 blocks, CAM++ growth 32 / 128 "
                    "channels; ~1 GB, for a one-off check, not for the repository; no speech "
                    "tokenizer ONNX export)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(1)
    fe = os.path.join(a.shared, "golden", "frontend")
    mel = np.load(os.path.join(fe, "whisper_logmel.npy")).astype(np.float32)
    fbank = np.load(os.path.join(fe, "kaldi_fbank_cmn.npy")).astype(np.float32)
    info = {"seed": a.seed, "torch": torch.__version__, "onnxruntime": None, "checks": {}}

    # sanity: s3tokenizer's log-mel of the shared 16 kHz prompt equals the shared golden features
    from s3tokenizer.utils import log_mel_spectrogram
    wav16 = torch.from_numpy(np.load(os.path.join(fe, "wav16k.npy")).astype(np.float32))
    lm = log_mel_spectrogram(wav16[None], n_mels=128).numpy()
    info["checks"]["s3tokenizer_logmel_vs_golden_maxabs"] = float(np.abs(lm - mel).max())

    s3, cfg = make_s3(a.seed, a.size)
    sd = s3.state_dict()
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in sd.items()},
               os.path.join(a.out, "s3tok_small.pt"))
    for case, T in CASES_S3.items():
        x = mel if T is None else mel[:, :, :T].copy()
        r = run_s3(s3, x)
        for k, v in r.items():
            if case == "full" or k not in FULL_ONLY:
                np.save(os.path.join(a.out, f"s3_{case}_{k}.npy"), np.ascontiguousarray(v))
        p = np.tanh(r["proj"].astype(np.float64)) * 0.9990000128746033
        margin = np.abs(np.abs(p) - 0.5).min()
        info["checks"][f"s3_{case}"] = {"frames": int(x.shape[-1]), "tokens": int(len(r["tokens"])),
                                        "distinct_tokens": int(len(set(r["tokens"].tolist()))),
                                        "min_fsq_margin": float(margin)}
    s3o = os.path.join(a.out, "s3tok_small.onnx")
    if a.size == "full":
        s3o = None
    else:
        export_onnx(S3Onnx(s3).eval(), (torch.from_numpy(mel), torch.tensor([mel.shape[-1]], dtype=torch.int32)),
                s3o, ["feats", "feats_length"], {"feats": {2: "T"}, "out": {1: "T4"}})

    cam = make_campplus(a.seed, a.campplus_src, a.size)
    torch.save({k: v.half() if v.is_floating_point() else v for k, v in cam.state_dict().items()},
               os.path.join(a.out, "campplus_small.pt"))
    camo = os.path.join(a.out, "campplus_small.onnx")
    export_onnx(cam, (torch.from_numpy(fbank)[None],), camo, ["input"], {"input": {1: "T"}})
    s3_sess, cam_sess, info["onnxruntime"] = ort_sessions(s3o, camo)
    if s3_sess:
        tok = s3_sess.run(None, {"feats": mel, "feats_length": np.array([mel.shape[-1]], np.int32)})[0][0]
        ref = np.load(os.path.join(a.out, "s3_full_tokens.npy"))
        info["checks"]["ort_s3_token_mismatches"] = int((tok != ref).sum())
    from speakerlab.models.campplus import layers as cam_layers
    seg_pool_real = cam_layers.CAMLayer.seg_pooling
    rel = lambda x, y: float(np.linalg.norm(x - y) / np.linalg.norm(y))
    for case, T in CASES_CAM.items():
        x = cam_input(fbank, T)
        cam_layers.CAMLayer.seg_pooling = seg_pool_real
        emb_real = run_campplus(cam, x)["embedding"]
        cam_layers.CAMLayer.seg_pooling = seg_pool_div_kernel
        r = run_campplus(cam, x)
        chk = {"frames": int(x.shape[0]), "last_segment": ((T - 1) // 2) % 100 + 1,
               "embedding_norm": float(np.linalg.norm(r["embedding"]))}
        emb = cam_sess.run(None, {"input": x[None]})[0][0]
        chk["torch_div100_vs_ort_rel_l2"] = rel(r["embedding"], emb)
        chk["torch_real_length_vs_ort_rel_l2"] = rel(emb_real, emb)
        r["embedding"] = emb
        for k, v in r.items():
            if case == "full" or k not in FULL_ONLY:
                np.save(os.path.join(a.out, f"cam_{case}_{k}.npy"), np.ascontiguousarray(v))
        info["checks"][f"cam_{case}"] = chk
    cam_layers.CAMLayer.seg_pooling = seg_pool_real
    with open(os.path.join(a.out, "info.json"), "w") as fh:
        json.dump(info, fh, indent=1)
    print(json.dumps(info["checks"], indent=1))


if __name__ == "__main__":
    main()
