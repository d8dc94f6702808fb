"""Convert the released Fun-CosyVoice3-0.5B model folder into one libcosyvoice model file.

    cosyvoice-convert RELEASED_FOLDER -o model.gguf [--rl] [--dtype bf16|f16|f32]
                      [--no-frontend] [--wetext DIR | --no-text-grammars]
    (python -m cosyvoice.convert ...; tools/convert.py in a checkout: the same command)

RELEASED_FOLDER is the folder as downloaded (docs/real-weights.md): llm.pt, flow.pt, hift.pt,
campplus.onnx, speech_tokenizer_v3.onnx, cosyvoice3.yaml and CosyVoice-BlankEN/ (the Qwen
tokenizer: vocab.json, merges.txt, tokenizer_config.json); llm.rl.pt, the reinforcement-learning
tuned LLM, replaces llm.pt with --rl. The 278 special tokens CosyVoice3 adds to the Qwen tokenizer
are defined in the CosyVoice source, not in the folder: the converter carries them
(cosyvoice3_tokens.py); --added-tokens reads them from a file instead.

cosyvoice3.yaml, when present, is checked against what the converter writes: the class of each
network (a CosyVoice2 folder is refused), the rates, the flow and vocoder constants and the
geometry read off the checkpoints (a value that differs is an error naming the yaml key). The
front-end models (speech tokenizer v3 and CAM++, needed by cosy_voice_from_audio) are the
folder's .onnx files (frontend.py maps them by graph structure; reading them needs the `onnx`
package), or --speech-tokenizer / --campplus name an .onnx file or a PyTorch state dict;
--no-frontend leaves them out. Everything else is numpy only (the .pt files are read without
torch). The format is docs/model-format.md.
The text normalization grammars (docs/model-format.md section 9) are the OpenFst files of the
installed `wetext` wheel (pip install wetext==0.1.8; only its files are read, it is not imported)
or of --wetext DIR; without them the file is written without grammars (a note says so) and the
library normalizes whitespace only.
Weight norm is folded (W = g * v / ||v||, norm over all but dim 0); the flow's fixed noise buffer
(torch.manual_seed(0); torch.randn(1, 80, 15000)) is reproduced and checked against torch's values.
"""
import argparse
import ast
import json
import os
import re
import sys

from typing import Callable, Optional, Sequence

import numpy as np

from . import frontend as fe
from . import gguf_writer as gw
from . import ptread
from . import torch_rng

FORMAT_VERSION = 1
DTYPES = {"f32": gw.GGML_F32, "f16": gw.GGML_F16, "bf16": gw.GGML_BF16}
HEAD_DIM = 64          # Qwen2-0.5B and the DiT both use 64-wide heads
SPEECH_TOKENS = 6561   # FSQ codebook 3^8
SPK_DIM = 192
MEL = 80


class ConvertError(Exception):
    """The model folder or a file in it cannot be converted; the message names the file and
    what is wrong."""


def fold_weight_norm(g, v):
    """torch.nn.utils.parametrizations.weight_norm(dim=0): W = g * v / ||v|| (norm over dims 1..)."""
    v64 = v.astype(np.float64)
    norm = np.sqrt((v64 ** 2).reshape(v.shape[0], -1).sum(axis=1))
    return (g.astype(np.float64).reshape(-1) / norm).reshape((-1,) + (1,) * (v.ndim - 1)) * v64


# ----------------------------------------------------------------------------------------------
# checkpoint -> (file tensor name -> float array), hyperparameters

def _take(sd, key, src):
    if key not in sd:
        raise ConvertError(f"{src}: missing tensor {key}")
    return sd.pop(key).array


def _expect(arr, shape, what):
    if tuple(arr.shape) != tuple(shape):
        raise ConvertError(f"{what}: expected shape {list(shape)}, checkpoint has {list(arr.shape)}")
    return arr


def map_llm(sd, src="llm.pt"):
    sd = dict(sd)
    pre = "llm.model.model."
    emb = _take(sd, pre + "embed_tokens.weight", src)
    vocab, H = emb.shape
    n_layers = 0
    while f"{pre}layers.{n_layers}.self_attn.q_proj.weight" in sd:
        n_layers += 1
    if n_layers == 0:
        raise ConvertError(f"{src}: no decoder layers ({pre}layers.0.*) found")
    q0 = sd[f"{pre}layers.0.self_attn.q_proj.weight"].array
    k0 = sd[f"{pre}layers.0.self_attn.k_proj.weight"].array if \
        f"{pre}layers.0.self_attn.k_proj.weight" in sd else None
    if k0 is None:
        raise ConvertError(f"{src}: missing tensor {pre}layers.0.self_attn.k_proj.weight")
    inter = sd[f"{pre}layers.0.mlp.gate_proj.weight"].array.shape[0] if \
        f"{pre}layers.0.mlp.gate_proj.weight" in sd else None
    if inter is None:
        raise ConvertError(f"{src}: missing tensor {pre}layers.0.mlp.gate_proj.weight")
    nh, nkv = q0.shape[0] // HEAD_DIM, k0.shape[0] // HEAD_DIM
    if q0.shape[0] % HEAD_DIM or k0.shape[0] % HEAD_DIM or nh % nkv:
        raise ConvertError(f"{src}: attention widths {q0.shape[0]}/{k0.shape[0]} are not heads of 64")
    out = {"llm.embed_tokens.weight": emb}
    for i in range(n_layers):
        p = f"{pre}layers.{i}."
        shapes = {
            "self_attn.q_proj.weight": (nh * HEAD_DIM, H), "self_attn.q_proj.bias": (nh * HEAD_DIM,),
            "self_attn.k_proj.weight": (nkv * HEAD_DIM, H), "self_attn.k_proj.bias": (nkv * HEAD_DIM,),
            "self_attn.v_proj.weight": (nkv * HEAD_DIM, H), "self_attn.v_proj.bias": (nkv * HEAD_DIM,),
            "self_attn.o_proj.weight": (H, nh * HEAD_DIM),
            "mlp.gate_proj.weight": (inter, H), "mlp.up_proj.weight": (inter, H),
            "mlp.down_proj.weight": (H, inter),
            "input_layernorm.weight": (H,), "post_attention_layernorm.weight": (H,),
        }
        for k, shp in shapes.items():
            out[f"llm.layers.{i}.{k}"] = _expect(_take(sd, p + k, src), shp, f"{src}: {p}{k}")
    out["llm.norm.weight"] = _expect(_take(sd, pre + "norm.weight", src), (H,), f"{src}: norm")
    se = _take(sd, "speech_embedding.weight", src)
    n_speech = se.shape[0]
    out["llm.speech_embedding.weight"] = _expect(se, (n_speech, H), f"{src}: speech_embedding.weight")
    out["llm.llm_decoder.weight"] = _expect(_take(sd, "llm_decoder.weight", src), (n_speech, H),
                                            f"{src}: llm_decoder.weight")
    if n_speech <= SPEECH_TOKENS + 3:
        raise ConvertError(f"{src}: speech vocabulary of {n_speech} rows has no sos/eos/task_id")
    sd.pop("llm.model.lm_head.weight", None)   # HF's tied text head: never used by CosyVoice
    if sd:
        raise ConvertError(f"{src}: unexpected tensors {sorted(sd)[:5]}")
    hp = dict(hidden_size=H, n_layers=n_layers, n_heads=nh, n_kv_heads=nkv, head_dim=HEAD_DIM,
              intermediate_size=inter, text_vocab_size=vocab, speech_vocab_size=n_speech,
              speech_token_size=SPEECH_TOKENS)
    return out, hp


def map_flow(sd, src="flow.pt"):
    sd = dict(sd)
    est = "decoder.estimator."
    D = _take(sd, est + "input_embed.proj.weight", src)
    dim = D.shape[0]
    _expect(D, (dim, 4 * MEL), f"{src}: {est}input_embed.proj.weight")
    out = {"flow.dit.input_embed.proj.weight": D}
    depth = 0
    while f"{est}transformer_blocks.{depth}.attn.to_q.weight" in sd:
        depth += 1
    if depth == 0:
        raise ConvertError(f"{src}: no DiT blocks ({est}transformer_blocks.0.*) found")
    ffk = f"{est}transformer_blocks.0.ff.ff.0.0.weight"
    if ffk not in sd:
        raise ConvertError(f"{src}: missing tensor {ffk}")
    ff = sd[ffk].array.shape[0]
    pck = "pre_lookahead_layer.conv1.weight"
    if pck not in sd:
        raise ConvertError(f"{src}: missing tensor {pck}")
    pre_ch = sd[pck].array.shape[0]
    cpk = est + "input_embed.conv_pos_embed.conv1.0.weight"
    if cpk not in sd:
        raise ConvertError(f"{src}: missing tensor {cpk}")
    cp_in, cp_k = sd[cpk].array.shape[1], sd[cpk].array.shape[2]
    if dim % HEAD_DIM or dim % cp_in:
        raise ConvertError(f"{src}: DiT width {dim} is not heads of 64 / groups of {cp_in}")
    groups = dim // cp_in
    shapes = {
        "input_embedding.weight": (SPEECH_TOKENS, MEL),
        "spk_embed_affine_layer.weight": (MEL, SPK_DIM), "spk_embed_affine_layer.bias": (MEL,),
        "pre_lookahead_layer.conv1.weight": (pre_ch, MEL, 4), "pre_lookahead_layer.conv1.bias": (pre_ch,),
        "pre_lookahead_layer.conv2.weight": (MEL, pre_ch, 3), "pre_lookahead_layer.conv2.bias": (MEL,),
        est + "time_embed.time_mlp.0.weight": (dim, 256), est + "time_embed.time_mlp.0.bias": (dim,),
        est + "time_embed.time_mlp.2.weight": (dim, dim), est + "time_embed.time_mlp.2.bias": (dim,),
        est + "input_embed.proj.bias": (dim,),
        est + "input_embed.conv_pos_embed.conv1.0.weight": (dim, cp_in, cp_k),
        est + "input_embed.conv_pos_embed.conv1.0.bias": (dim,),
        est + "input_embed.conv_pos_embed.conv2.0.weight": (dim, cp_in, cp_k),
        est + "input_embed.conv_pos_embed.conv2.0.bias": (dim,),
        est + "norm_out.linear.weight": (2 * dim, dim), est + "norm_out.linear.bias": (2 * dim,),
        est + "proj_out.weight": (MEL, dim), est + "proj_out.bias": (MEL,),
    }
    for i in range(depth):
        b = f"{est}transformer_blocks.{i}."
        shapes.update({
            b + "attn_norm.linear.weight": (6 * dim, dim), b + "attn_norm.linear.bias": (6 * dim,),
            b + "attn.to_q.weight": (dim, dim), b + "attn.to_q.bias": (dim,),
            b + "attn.to_k.weight": (dim, dim), b + "attn.to_k.bias": (dim,),
            b + "attn.to_v.weight": (dim, dim), b + "attn.to_v.bias": (dim,),
            b + "attn.to_out.0.weight": (dim, dim), b + "attn.to_out.0.bias": (dim,),
            b + "ff.ff.0.0.weight": (ff, dim), b + "ff.ff.0.0.bias": (ff,),
            b + "ff.ff.2.weight": (dim, ff), b + "ff.ff.2.bias": (dim,),
        })
    for k, shp in shapes.items():
        name = "flow.dit." + k[len(est):] if k.startswith(est) else "flow." + k
        out[name] = _expect(_take(sd, k, src), shp, f"{src}: {k}")
    inv = sd.pop(est + "rotary_embed.inv_freq", None)
    if inv is not None:
        want = 1.0 / (10000.0 ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM))
        if inv.array.shape != (HEAD_DIM // 2,) or not np.allclose(inv.array, want, rtol=1e-6):
            raise ConvertError(f"{src}: rotary inv_freq is not 10000^(-2i/64)")
    if sd:
        raise ConvertError(f"{src}: unexpected tensors {sorted(sd)[:5]}")
    hp = dict(mel_dim=MEL, spk_embed_dim=SPK_DIM, vocab_size=SPEECH_TOKENS, pre_lookahead_len=3,
              pre_channels=pre_ch, dit_dim=dim, dit_depth=depth, dit_heads=dim // HEAD_DIM,
              dit_head_dim=HEAD_DIM, dit_ff_dim=ff, conv_pos_kernel=cp_k, conv_pos_groups=groups,
              static_chunk_size=50, token_mel_ratio=2, n_timesteps=10, noise_frames=15000)
    return out, hp


def map_hift(sd, src="hift.pt"):
    raw = {}
    for k, t in sd.items():
        raw[k[len("generator."):] if k.startswith("generator.") else k] = t
    out = {}
    gsuf, vsuf = ".parametrizations.weight.original0", ".parametrizations.weight.original1"
    for k in sorted(raw):
        if k.endswith(gsuf):
            base = k[: -len(gsuf)]
            if base + vsuf not in raw:
                raise ConvertError(f"{src}: {k} has no matching {base + vsuf}")
            g, v = raw[k].array, raw[base + vsuf].array
            if g.shape[0] != v.shape[0] or g.size != v.shape[0]:
                raise ConvertError(f"{src}: weight-norm g {list(g.shape)} does not match v {list(v.shape)}")
            out["hift." + base + ".weight"] = fold_weight_norm(g, v).astype(np.float32)
        elif k.endswith(vsuf):
            if k[: -len(vsuf)] + gsuf not in raw:
                raise ConvertError(f"{src}: {k} has no matching {k[:-len(vsuf)] + gsuf}")
        elif k.endswith(".weight_g") or k.endswith(".weight_v"):     # old-style weight norm
            base = k[:-len(".weight_g")]
            if k.endswith(".weight_g"):
                if base + ".weight_v" not in raw:
                    raise ConvertError(f"{src}: {k} has no matching weight_v")
                out["hift." + base + ".weight"] = fold_weight_norm(
                    raw[k].array, raw[base + ".weight_v"].array).astype(np.float32)
        else:
            out["hift." + k] = raw[k].array
    # derive and check the geometry
    need = ["hift.conv_pre.weight", "hift.f0_predictor.condnet.0.weight", "hift.m_source.l_linear.weight",
            "hift.conv_post.weight", "hift.ups.0.weight", "hift.ups.1.weight", "hift.ups.2.weight"]
    for n in need:
        if n not in out:
            raise ConvertError(f"{src}: missing tensor {n[5:]}")
    base_ch = out["hift.conv_pre.weight"].shape[0]
    cond_ch = out["hift.f0_predictor.condnet.0.weight"].shape[0]
    nb = out["hift.m_source.l_linear.weight"].shape[1] - 1
    up_k = [out[f"hift.ups.{i}.weight"].shape[2] for i in range(3)]
    hp = dict(base_channels=base_ch, cond_channels=cond_ch, nb_harmonics=nb, sample_rate=24000,
              istft_n_fft=16, istft_hop=4, conv_pre_look_right=4)
    hp_arrays = dict(upsample_rates=[8, 5, 3], upsample_kernel_sizes=up_k,
                     resblock_kernel_sizes=[3, 7, 11], resblock_dilations=[1, 3, 5],
                     source_resblock_kernel_sizes=[7, 7, 11])
    expected = expected_hift_shapes(hp, hp_arrays)
    for n, shp in expected.items():
        if n not in out:
            raise ConvertError(f"{src}: missing tensor {n[5:]} (folded)")
        _expect(out[n], shp, f"{src}: {n[5:]}")
    extra = sorted(set(out) - set(expected))
    if extra:
        raise ConvertError(f"{src}: unexpected tensors {extra[:5]}")
    return out, hp, hp_arrays


def expected_hift_shapes(hp, hpa):
    C, Cc, nb = hp["base_channels"], hp["cond_channels"], hp["nb_harmonics"]
    nf = hp["istft_n_fft"] // 2 + 1
    e = {"hift.m_source.l_linear.weight": (1, nb + 1), "hift.m_source.l_linear.bias": (1,),
         "hift.conv_pre.weight": (C, MEL, 5), "hift.conv_pre.bias": (C,),
         "hift.f0_predictor.condnet.0.weight": (Cc, MEL, 4), "hift.f0_predictor.condnet.0.bias": (Cc,),
         "hift.f0_predictor.classifier.weight": (1, Cc), "hift.f0_predictor.classifier.bias": (1,)}
    for j in (2, 4, 6, 8):
        e[f"hift.f0_predictor.condnet.{j}.weight"] = (Cc, Cc, 3)
        e[f"hift.f0_predictor.condnet.{j}.bias"] = (Cc,)
    ch = C
    down_k = [30, 6, 1]   # source_downs: kernel 2*stride (last 1); stride = prod(rates[i+1:])
    for i in range(3):
        co = ch // 2
        e[f"hift.ups.{i}.weight"] = (co, ch, hpa["upsample_kernel_sizes"][i])
        e[f"hift.ups.{i}.bias"] = (co,)
        e[f"hift.source_downs.{i}.weight"] = (co, 2 * nf, down_k[i])
        e[f"hift.source_downs.{i}.bias"] = (co,)
        for pfx, ks in (("source_resblocks", [hpa["source_resblock_kernel_sizes"][i]]),
                        ("resblocks", hpa["resblock_kernel_sizes"])):
            for r, k in enumerate(ks):
                idx = i if pfx == "source_resblocks" else 3 * i + r
                for conv in ("convs1", "convs2"):
                    for j in range(3):
                        e[f"hift.{pfx}.{idx}.{conv}.{j}.weight"] = (co, co, k)
                        e[f"hift.{pfx}.{idx}.{conv}.{j}.bias"] = (co,)
                for act in ("activations1", "activations2"):
                    for j in range(3):
                        e[f"hift.{pfx}.{idx}.{act}.{j}.alpha"] = (co,)
        ch = co
    e["hift.conv_post.weight"] = (2 * nf, ch, 7)
    e["hift.conv_post.bias"] = (2 * nf,)
    return e


# ----------------------------------------------------------------------------------------------
# tokenizer

def bytes_to_unicode():
    """GPT-2 byte -> printable unicode map used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def load_added_tokens(path):
    """The CosyVoice3 additional special tokens, in order: from a JSON file (a list of strings, or
    {"additional_special_tokens": [{"content": ...}, ...]}) or from the upstream tokenizer.py."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith(".json"):
        obj = json.loads(text)
        lst = obj["additional_special_tokens"] if isinstance(obj, dict) else obj
        return [x["content"] if isinstance(x, dict) else x for x in lst]
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "CosyVoice3Tokenizer":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Dict):
                    for k, v in zip(sub.keys, sub.values):
                        if isinstance(k, ast.Constant) and k.value == "additional_special_tokens":
                            return [ast.literal_eval(e) for e in v.elts]
    raise ConvertError(f"{path}: no CosyVoice3Tokenizer additional_special_tokens list found")


def load_tokenizer(tok_dir, added_path=None):
    """-> (tokens by id, token types by id, merges, eos id, endofprompt id). added_path: a file
    with the CosyVoice3 special tokens (load_added_tokens); None = the list this package carries
    (cosyvoice3_tokens.py)."""
    try:
        with open(os.path.join(tok_dir, "vocab.json"), encoding="utf-8") as fh:
            vocab = json.load(fh)
        with open(os.path.join(tok_dir, "merges.txt"), encoding="utf-8") as fh:
            merges = [ln.rstrip("\n") for ln in fh if ln.strip() and not ln.startswith("#version")]
        with open(os.path.join(tok_dir, "tokenizer_config.json"), encoding="utf-8") as fh:
            cfg = json.load(fh)
    except OSError as exc:
        raise ConvertError(f"tokenizer: {exc}") from None
    n = len(vocab)
    tokens = [None] * n
    for s, i in vocab.items():
        if not 0 <= i < n or tokens[i] is not None:
            raise ConvertError(f"tokenizer: vocab.json ids are not 0..{n - 1}")
        tokens[i] = s
    types = [1] * n
    base = sorted((int(i), d["content"]) for i, d in cfg.get("added_tokens_decoder", {}).items())
    for i, s in base:
        if i != len(tokens):
            raise ConvertError(f"tokenizer: base special token {s} has id {i}, expected {len(tokens)}")
        tokens.append(s)
        types.append(3)
    if added_path is None:
        from .cosyvoice3_tokens import ADDED_TOKENS
        added = list(ADDED_TOKENS)
    else:
        added = load_added_tokens(added_path)
    for s in added:
        if s in tokens[n:]:
            continue                       # <|im_start|>, <|im_end|> exist already
        tokens.append(s)
        types.append(4)
    for m in merges:
        if len(m.split(" ")) != 2:
            raise ConvertError(f"tokenizer: bad merge line {m!r}")
    try:
        eos = tokens.index("<|endoftext|>")
        eop = tokens.index("<|endofprompt|>")
    except ValueError as exc:
        raise ConvertError(f"tokenizer: {exc}") from None
    return tokens, types, merges, eos, eop


# ----------------------------------------------------------------------------------------------
# text normalization grammars (wetext's OpenFst files)

WETEXT_VERSION = "0.1.8"   # the wheel whose grammars the golden text data was made with
TEXT_GRAMMARS = [          # (model file key, file under the wheel's fsts/ directory)
    ("cosyvoice.text.zh_tn_tagger", "zh/tn/tagger.fst"),
    ("cosyvoice.text.zh_tn_verbalizer", "zh/tn/verbalizer.fst"),
    ("cosyvoice.text.en_tn_tagger", "en/tn/tagger.fst"),
    ("cosyvoice.text.en_tn_verbalizer", "en/tn/verbalizer.fst"),
]
FST_MAGIC = 2125659606


def find_wetext_fsts():
    """(fsts directory, version) of the installed wetext wheel, or (None, None). The package is
    located, not imported (importing it needs kaldifst)."""
    import importlib.util
    spec = importlib.util.find_spec("wetext")
    if spec is None or not spec.origin:
        return None, None
    d = os.path.join(os.path.dirname(spec.origin), "fsts")
    try:
        from importlib.metadata import version
        ver = version("wetext")
    except Exception:  # noqa: BLE001 - metadata missing: still usable
        ver = "unknown"
    return (d, ver) if os.path.isdir(d) else (None, None)


def load_text_grammars(fsts_dir, ver="unknown"):
    """-> {key: bytes} plus the version key, checked to be OpenFst vector FSTs."""
    out = {}
    for key, rel in TEXT_GRAMMARS:
        p = os.path.join(fsts_dir, rel)
        try:
            with open(p, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise ConvertError(f"text grammars: {exc}") from None
        if len(data) < 16 or int.from_bytes(data[:4], "little") != FST_MAGIC or \
                data[8:14] != b"vector":
            raise ConvertError(f"{p}: not an OpenFst vector FST")
        out[key] = data
    out["cosyvoice.text.wetext_version"] = ver
    return out


def text_grammars(wetext_dir=None, enabled=True, log=print):
    """The grammars to pack: from wetext_dir, else the installed wheel, else None (with a note)."""
    if not enabled:
        return None
    if wetext_dir:
        return load_text_grammars(wetext_dir, "unknown (--wetext)")
    d, ver = find_wetext_fsts()
    if d is None:
        log("note: wetext is not installed (pip install wetext==%s): the model file gets no text "
            "normalization grammars" % WETEXT_VERSION)
        return None
    if ver != WETEXT_VERSION:
        log(f"note: packing the grammars of wetext {ver} (the golden text data is from "
            f"{WETEXT_VERSION})")
    return load_text_grammars(d, ver)


# ----------------------------------------------------------------------------------------------
# writing

LLM_F = dict(rope_theta=1e6, rms_norm_eps=1e-6)
FLOW_F = dict(cfg_rate=0.7)
HIFT_F = dict(nsf_alpha=0.1, nsf_sigma=0.003, voiced_threshold=10.0, lrelu_slope=0.1, audio_limit=0.99)


def frontend_dict(s3=None, cam=None):
    """Front-end tensors and keys for write_model from frontend_convert's results:
    s3 = (tensors, u32 hparams, f32 hparams), cam = (tensors, u32 hparams, array hparams)."""
    out = {"tensors": {}, "u32": {}, "f32": {}, "arrays": {}}
    if s3:
        t, hp, hpf = s3
        out["tensors"].update(t)
        out["u32"].update({f"cosyvoice.s3tok.{k}": v for k, v in hp.items()})
        out["f32"].update({f"cosyvoice.s3tok.{k}": v for k, v in hpf.items()})
    if cam:
        t, hp, hpa = cam
        out["tensors"].update(t)
        out["u32"].update({f"cosyvoice.campplus.{k}": v for k, v in hp.items()})
        hpa = dict(hpa, block_dilations=[1, 2, 2])
        out["arrays"].update({f"cosyvoice.campplus.{k}": v for k, v in hpa.items()})
    return out


def load_frontend(s3_path=None, cam_path=None):
    """The optional front-end models (frontend.py): an ONNX file (by its .onnx
    extension; needs the onnx package) or a PyTorch state dict each. -> dict for write_model."""
    def read(path, from_onnx, from_sd):
        if not os.path.exists(path):
            raise ConvertError(f"{path}: not found")
        try:
            if path.endswith(".onnx"):
                return from_onnx(path)
            try:
                sd = ptread.load(path)
            except ValueError as exc:
                raise ConvertError(str(exc)) from None
            return from_sd(sd, path)
        except fe.FrontendError as exc:
            raise ConvertError(str(exc)) from None
    return frontend_dict(
        read(s3_path, fe.s3tok_from_onnx, fe.s3tok_from_state_dict) if s3_path else None,
        read(cam_path, fe.campplus_from_onnx, fe.campplus_from_state_dict) if cam_path else None)


def write_model(path, tensors, hp_llm, hp_flow, hp_hift, hp_hift_arrays, tok, dtype, name,
                noise=None, text=None, frontend=None):
    tokens, types, merges, eos, eop = tok
    if len(tokens) > hp_llm["text_vocab_size"]:
        raise ConvertError(f"tokenizer has {len(tokens)} tokens, the text embedding only "
                           f"{hp_llm['text_vocab_size']} rows")
    w = gw.Writer()
    w.add_string("general.architecture", "cosyvoice3")
    w.add_string("general.name", name)
    w.add_u32("cosyvoice.format_version", FORMAT_VERSION)
    w.add_string("cosyvoice.weight_dtype", dtype)
    for k, v in hp_llm.items():
        w.add_u32(f"cosyvoice.llm.{k}", v)
    for k, v in LLM_F.items():
        w.add_f32(f"cosyvoice.llm.{k}", v)
    for k, v in hp_flow.items():
        w.add_u32(f"cosyvoice.flow.{k}", v)
    for k, v in FLOW_F.items():
        w.add_f32(f"cosyvoice.flow.{k}", v)
    for k, v in hp_hift.items():
        w.add_u32(f"cosyvoice.hift.{k}", v)
    for k, v in hp_hift_arrays.items():
        w.add_array(f"cosyvoice.hift.{k}", gw.T_UINT32, v)
    for k, v in HIFT_F.items():
        w.add_f32(f"cosyvoice.hift.{k}", v)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "qwen2")
    w.add_array("tokenizer.ggml.tokens", gw.T_STRING, tokens)
    w.add_array("tokenizer.ggml.token_type", gw.T_INT32, types)
    w.add_array("tokenizer.ggml.merges", gw.T_STRING, merges)
    w.add_u32("tokenizer.ggml.eos_token_id", eos)
    w.add_u32("cosyvoice.tokenizer.endofprompt_id", eop)
    for k, v in (text or {}).items():
        if isinstance(v, str):
            w.add_string(k, v)
        else:
            w.add_array(k, gw.T_UINT8, v)
    if frontend:
        for k, v in frontend["u32"].items():
            w.add_u32(k, int(v))
        for k, v in frontend["f32"].items():
            w.add_f32(k, float(v))
        for k, v in frontend["arrays"].items():
            w.add_array(k, gw.T_UINT32, [int(x) for x in v])
        for n, a in frontend["tensors"].items():     # always f32
            w.add_tensor(n, a if isinstance(a, gw.Lazy) else np.asarray(a, dtype=np.float32),
                         gw.GGML_F32)
    wt = DTYPES[dtype]
    for n in sorted(tensors):
        a = tensors[n]            # an array, or a gguf_writer.Lazy made at write time
        if not isinstance(a, gw.Lazy):
            a = np.asarray(a, dtype=np.float32)
        low = a.ndim >= 2 and (n.startswith("llm.") or n.startswith("flow."))
        w.add_tensor(n, a, wt if low else gw.GGML_F32)
    if noise is None:
        noise = torch_rng.flow_noise(hp_flow["noise_frames"], hp_flow["mel_dim"])
    w.add_tensor("flow.noise", noise, gw.GGML_F32)
    w.write(path)


LLM_FILES = {False: "llm.pt", True: "llm.rl.pt"}
CONFIG_FILE = "cosyvoice3.yaml"
OTHER_CONFIGS = {"cosyvoice.yaml": "CosyVoice 1", "cosyvoice2.yaml": "CosyVoice2"}


def check_folder(model_dir, rl=False):
    """Refuse, with what is wrong, a path that is not a CosyVoice3 model folder."""
    if not os.path.exists(model_dir):
        raise ConvertError(f"{model_dir}: not found (the model folder as downloaded: "
                           f"docs/real-weights.md)")
    if not os.path.isdir(model_dir):
        raise ConvertError(f"{model_dir}: not a folder (give the model folder as downloaded, "
                           f"holding llm.pt, flow.pt, hift.pt, ...)")
    if not os.path.exists(os.path.join(model_dir, CONFIG_FILE)):
        for fn, what in OTHER_CONFIGS.items():
            if os.path.exists(os.path.join(model_dir, fn)):
                raise ConvertError(f"{model_dir}: a {what} folder ({fn}); libcosyvoice runs "
                                   f"Fun-CosyVoice3-0.5B (a folder with {CONFIG_FILE})")
    llm = os.path.join(model_dir, LLM_FILES[rl])
    if rl and not os.path.exists(llm):
        raise ConvertError(f"{llm}: not found (--rl takes the folder's llm.rl.pt; this folder has "
                           f"none: convert without --rl)")


def check_yaml(model_dir, hp_llm, hp_flow, hp_hift, hp_hift_a, log=print):
    """Compare MODEL_DIR/cosyvoice3.yaml, when present, with what is about to be written."""
    p = os.path.join(model_dir, CONFIG_FILE)
    if not os.path.exists(p):
        return
    from . import config
    try:
        cfg = config.load(p)
        exp = config.expected_values(hp_llm, hp_flow, hp_hift, hp_hift_a, LLM_F, FLOW_F, HIFT_F)
        n, missing = config.check_config(cfg, exp, p)
    except config.ConfigError as exc:
        raise ConvertError(f"{exc} (--no-yaml-check converts anyway)") from None
    if missing:
        log(f"note: {p} has no {', '.join(missing)}: not compared")
    return n


def convert(model_dir: str, out: str, dtype: str = "bf16", tok_dir: Optional[str] = None,
            added: Optional[str] = None, name: str = "Fun-CosyVoice3-0.5B",
            wetext_dir: Optional[str] = None, text: bool = True, s3_path: Optional[str] = None,
            cam_path: Optional[str] = None, rl: bool = False, frontend: bool = True,
            yaml_check: bool = True, log: Optional[Callable[[str], None]] = None) -> int:
    """Convert the model folder model_dir into the model file out; -> number of tensors written.
    rl: take llm.rl.pt instead of llm.pt; frontend: take the folder's .onnx front-end models
    (s3_path / cam_path name others; '' = none); yaml_check: compare cosyvoice3.yaml when present.
    ConvertError says what is wrong with the input."""
    if log is None:
        def log(m: str) -> None:
            print(m, file=sys.stderr)

    def load(fn):
        p = os.path.join(model_dir, fn)
        if not os.path.exists(p):
            raise ConvertError(f"{p}: not found")
        try:
            return ptread.load(p)
        except ValueError as exc:
            raise ConvertError(str(exc)) from None

    check_folder(model_dir, rl)
    llm_file = LLM_FILES[rl]
    llm, hp_llm = map_llm(load(llm_file), llm_file)
    flow, hp_flow = map_flow(load("flow.pt"))
    hift, hp_hift, hp_hift_a = map_hift(load("hift.pt"))
    if yaml_check:
        check_yaml(model_dir, hp_llm, hp_flow, hp_hift, hp_hift_a, log)
    tok = load_tokenizer(tok_dir or os.path.join(model_dir, "CosyVoice-BlankEN"), added)
    tensors = {**llm, **flow, **hift}
    if frontend:
        if s3_path is None and os.path.exists(os.path.join(model_dir, "speech_tokenizer_v3.onnx")):
            s3_path = os.path.join(model_dir, "speech_tokenizer_v3.onnx")
        if cam_path is None and os.path.exists(os.path.join(model_dir, "campplus.onnx")):
            cam_path = os.path.join(model_dir, "campplus.onnx")
        missing = [n for n, q in (("speech_tokenizer_v3.onnx", s3_path), ("campplus.onnx", cam_path))
                   if not q]
        if missing:
            log(f"note: no {' and no '.join(missing)}: voices cannot be cloned from audio with "
                f"this model file")
    else:
        s3_path = cam_path = None
    front = load_frontend(s3_path or None, cam_path or None)
    grammars = text_grammars(wetext_dir, text, log=log)
    write_model(out, tensors, hp_llm, hp_flow, hp_hift, hp_hift_a, tok, dtype, name, text=grammars,
                frontend=front)
    return len(tensors) + 1 + len(front["tensors"])


def main(argv: Optional[Sequence[str]] = None, prog: str = "cosyvoice-convert") -> int:
    """The cosyvoice-convert command; -> exit status (0, 1 on a conversion error)."""
    ap = argparse.ArgumentParser(
        prog=prog, description="Convert the released Fun-CosyVoice3-0.5B model folder into one "
        "libcosyvoice model file (docs/real-weights.md).")
    ap.add_argument("model_dir", metavar="RELEASED_FOLDER",
                    help="the model folder as downloaded: llm.pt, flow.pt, hift.pt, campplus.onnx, "
                    "speech_tokenizer_v3.onnx, cosyvoice3.yaml, CosyVoice-BlankEN/")
    ap.add_argument("-o", "--output", required=True, help="model file to write (.gguf)")
    ap.add_argument("--rl", action="store_true",
                    help="take llm.rl.pt (the reinforcement-learning tuned LLM) instead of llm.pt")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16",
                    help="storage type of the LLM and flow matrices (default bf16; HiFT stays f32)")
    ap.add_argument("--no-frontend", action="store_true",
                    help="leave out the front-end models (no voice cloning from audio; no onnx "
                    "package needed)")
    ap.add_argument("--tokenizer", help="tokenizer folder (default RELEASED_FOLDER/CosyVoice-BlankEN)")
    ap.add_argument("--added-tokens", help="the CosyVoice3 special tokens from CosyVoice's "
                    "cosyvoice/tokenizer/tokenizer.py or a JSON list (default: the list this "
                    "package carries)")
    ap.add_argument("--name", default="Fun-CosyVoice3-0.5B", help="general.name of the file")
    ap.add_argument("--wetext", metavar="DIR", help="fsts/ folder of a wetext wheel (default: "
                    "the installed wetext package)")
    ap.add_argument("--no-text-grammars", action="store_true",
                    help="write no text normalization grammars")
    ap.add_argument("--no-yaml-check", action="store_true",
                    help="do not compare cosyvoice3.yaml with what is written")
    ap.add_argument("--speech-tokenizer", help="speech tokenizer v3: the official .onnx or an "
                    "S3TokenizerV3 state dict (default RELEASED_FOLDER/speech_tokenizer_v3.onnx; "
                    "'' = none)")
    ap.add_argument("--campplus", help="CAM++ speaker model: the official .onnx or a CAMPPlus "
                    "state dict (default RELEASED_FOLDER/campplus.onnx; '' = none)")
    a = ap.parse_args(argv)
    if a.no_frontend and (a.speech_tokenizer or a.campplus):
        ap.error("--no-frontend with --speech-tokenizer / --campplus: choose one")
    try:
        n = convert(a.model_dir, a.output, a.dtype, a.tokenizer, a.added_tokens, a.name,
                    a.wetext, not a.no_text_grammars, a.speech_tokenizer, a.campplus, rl=a.rl,
                    frontend=not a.no_frontend, yaml_check=not a.no_yaml_check)
    except ConvertError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {a.output}: {n} tensors, weights {a.dtype}")
    return 0
