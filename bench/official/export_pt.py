#!/usr/bin/env python3
"""Export one libcosyvoice model file (GGUF) back to the official CosyVoice3 checkpoint layout.

    python3 bench/official/export_pt.py MODEL.gguf OUT_DIR [--dtype f32|bf16]

Writes OUT_DIR/llm.pt, flow.pt, hift.pt (torch.save'd state_dicts, loadable with strict=True by
CosyVoice3LM / CausalMaskedDiffWithDiT / CausalHiFTGenerator exactly as CosyVoice3Model.load does),
OUT_DIR/CosyVoice-BlankEN/config.json (a Qwen2 config built from the file's LLM hyperparameters),
OUT_DIR/geometry.json (every cosyvoice.* hyperparameter of the file, for run_official.py) and
OUT_DIR/flow_noise.pt (the file's fixed flow noise [1, 80, 15000], to check that the official
CausalConditionalCFM drew the same buffer).

This is the inverse of tools/convert.py (docs/model-format.md sections 4 and 5):
  LLM   llm.X -> llm.model.model.X (embed_tokens, layers.*, norm); llm.speech_embedding.weight ->
        speech_embedding.weight; llm.llm_decoder.weight -> llm_decoder.weight; the tied HF text
        head llm.model.lm_head.weight = embed_tokens (the same tensor, so one storage on disk).
  flow  flow.dit.X -> decoder.estimator.X; flow.X -> X; plus decoder.estimator.rotary_embed.inv_freq
        = 10000^(-2i/64) (x-transformers keeps it as a persistent buffer); flow.noise is not part
        of flow.pt (the official code draws it at construction) and goes to flow_noise.pt.
  HiFT  hift.X -> X. The file stores weight norm folded (W = g v / ||v||); the official module is
        parametrized (torch.nn.utils.parametrizations.weight_norm, dim 0), so every weight-normed
        conv is written un-folded as original0 = g = ||W|| over dims 1.. (shape [out, 1, 1]) and
        original1 = v = W, which reproduces W (up to one rounding) when the module recomputes it.
        Weight-normed: conv_pre, ups.*, resblocks.*.convs*, source_resblocks.*.convs*, conv_post,
        f0_predictor.condnet.*; plain: source_downs.*, m_source.l_linear, f0_predictor.classifier.

The GGUF reader below is independent of the project's C loader: numpy + a memory map only.
Needs numpy and torch.
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

# ----------------------------------------------------------------------------------------------
# a small GGUF v3 reader

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
_T_STRING, _T_ARRAY = 8, 9
_GGML = {0: ("f32", 4), 1: ("f16", 2), 26: ("i32", 4), 30: ("bf16", 2)}


class GGUF:
    """kv: {key: value}; tensors: {name: (torch-order shape, type name, byte offset in file)}."""

    def __init__(self, path):
        self.path = path
        self.mm = np.memmap(path, dtype=np.uint8, mode="r")
        self.pos = 0
        if self._read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, n_tensors, n_kv = struct.unpack("<IQQ", self._read(20))
        if version != 3:
            raise ValueError(f"{path}: GGUF version {version}, expected 3")
        self.kv = {}
        for _ in range(n_kv):
            key = self._str()
            (t,) = struct.unpack("<I", self._read(4))
            self.kv[key] = self._value(t)
        infos = []
        for _ in range(n_tensors):
            name = self._str()
            (nd,) = struct.unpack("<I", self._read(4))
            ne = struct.unpack(f"<{nd}Q", self._read(8 * nd))
            t, off = struct.unpack("<IQ", self._read(12))
            if t not in _GGML:
                raise ValueError(f"{path}: tensor {name} has unsupported type {t}")
            infos.append((name, tuple(reversed(ne)), t, off))
        align = int(self.kv.get("general.alignment", 32))
        data = (self.pos + align - 1) // align * align
        self.tensors = {n: (shape, _GGML[t][0], data + off) for n, shape, t, off in infos}

    def _read(self, n):
        b = bytes(self.mm[self.pos:self.pos + n])
        if len(b) != n:
            raise ValueError(f"{self.path}: truncated header")
        self.pos += n
        return b

    def _str(self):
        (n,) = struct.unpack("<Q", self._read(8))
        return self._read(n).decode("utf-8")

    def _value(self, t):
        if t == _T_STRING:
            return self._str()
        if t == _T_ARRAY:
            et, n = struct.unpack("<IQ", self._read(12))
            if et == _T_STRING:
                return [self._str() for _ in range(n)]
            if et not in _SCALAR:
                raise ValueError(f"{self.path}: unsupported array type {et}")
            fmt = _SCALAR[et]
            size = struct.calcsize(fmt)
            return list(struct.unpack(f"<{n}{fmt[1]}", self._read(size * n)))
        if t not in _SCALAR:
            raise ValueError(f"{self.path}: unsupported value type {t}")
        fmt = _SCALAR[t]
        return struct.unpack(fmt, self._read(struct.calcsize(fmt)))[0]

    def f32(self, name):
        """The tensor as a new float32 numpy array (PyTorch dimension order)."""
        shape, tname, off = self.tensors[name]
        n = int(np.prod(shape)) if shape else 1
        if tname == "f32":
            a = np.frombuffer(self.mm, dtype="<f4", count=n, offset=off).astype(np.float32)
        elif tname == "f16":
            a = np.frombuffer(self.mm, dtype="<f2", count=n, offset=off).astype(np.float32)
        elif tname == "bf16":
            u = np.frombuffer(self.mm, dtype="<u2", count=n, offset=off)
            a = (u.astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(self.mm, dtype="<i4", count=n, offset=off).astype(np.float32)
        return a.reshape(shape)


# ----------------------------------------------------------------------------------------------
# name mapping (inverse of tools/convert.py)

HIFT_WEIGHT_NORMED = re.compile(
    r"^(conv_pre|conv_post|ups\.\d+|(source_)?resblocks\.\d+\.convs[12]\.\d+|"
    r"f0_predictor\.condnet\.\d+)\.weight$")


def hparams(g):
    """cosyvoice.<part>.<key> -> {part: {key: value}}."""
    out = {}
    for k, v in g.kv.items():
        m = re.match(r"^cosyvoice\.(llm|flow|hift)\.(.+)$", k)
        if m:
            if isinstance(v, float):
                v = float(f"{v:.7g}")      # f32 KVs: 1e-6 instead of 9.99999997e-07
            out.setdefault(m.group(1), {})[m.group(2)] = v
    for part in ("llm", "flow", "hift"):
        if part not in out:
            raise ValueError(f"{g.path}: no cosyvoice.{part}.* hyperparameters")
    return out


def qwen2_config(hp):
    """A CosyVoice-BlankEN-like config.json (Qwen2.5-0.5B layout) from the LLM hyperparameters."""
    L = hp["n_layers"]
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": hp["text_vocab_size"], "hidden_size": hp["hidden_size"],
        "intermediate_size": hp["intermediate_size"], "num_hidden_layers": L,
        "num_attention_heads": hp["n_heads"], "num_key_value_heads": hp["n_kv_heads"],
        "head_dim": hp["head_dim"], "hidden_act": "silu", "max_position_embeddings": 32768,
        "rms_norm_eps": hp.get("rms_norm_eps", 1e-6), "rope_theta": hp.get("rope_theta", 1e6),
        "tie_word_embeddings": True, "use_sliding_window": False, "sliding_window": 32768,
        "max_window_layers": L, "attention_dropout": 0.0, "initializer_range": 0.02,
        "bos_token_id": 151643, "eos_token_id": 151643, "use_cache": True,
    }


def export(model, out_dir=None, dtype="f32", log=print):
    """-> dict(llm, flow, hift state_dicts, qwen2 config dict, geometry dict, noise tensor or None);
    written to out_dir when it is given (run_official.py can also take the GGUF directly)."""
    import torch

    tdtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype]
    g = GGUF(model)
    hp = hparams(g)

    def T(name):
        return torch.from_numpy(g.f32(name)).to(tdtype)

    names = sorted(g.tensors)
    # LLM
    llm = {}
    for n in names:
        if not n.startswith("llm."):
            continue
        k = n[len("llm."):]
        if k in ("speech_embedding.weight", "llm_decoder.weight"):
            llm[k] = T(n)
        else:
            llm["llm.model.model." + k] = T(n)
    llm["llm.model.lm_head.weight"] = llm["llm.model.model.embed_tokens.weight"]   # tied, one storage
    # flow
    flow = {}
    for n in names:
        if n == "flow.noise" or not n.startswith("flow."):
            continue
        k = n[len("flow."):]
        flow["decoder.estimator." + k[len("dit."):] if k.startswith("dit.") else k] = T(n)
    hd = int(hp["flow"]["dit_head_dim"])
    flow["decoder.estimator.rotary_embed.inv_freq"] = \
        1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    # HiFT (always fp32, as the file keeps it)
    hift = {}
    n_wn = 0
    for n in names:
        if not n.startswith("hift."):
            continue
        k = n[len("hift."):]
        w = torch.from_numpy(g.f32(n))
        if HIFT_WEIGHT_NORMED.match(k):
            base = k[:-len(".weight")]
            gnorm = w.double().reshape(w.shape[0], -1).norm(dim=1).reshape((-1,) + (1,) * (w.ndim - 1))
            hift[base + ".parametrizations.weight.original0"] = gnorm.float()
            hift[base + ".parametrizations.weight.original1"] = w
            n_wn += 1
        else:
            hift[k] = w
    noise = None
    if "flow.noise" in g.tensors:
        noise = torch.from_numpy(g.f32("flow.noise")).reshape(1, 80, -1)
    geo = {"source": os.path.abspath(model), "name": g.kv.get("general.name"),
           "weight_dtype": g.kv.get("cosyvoice.weight_dtype"), "export_dtype": dtype, **hp}
    out = dict(llm=llm, flow=flow, hift=hift, qwen2_config=qwen2_config(hp["llm"]), geometry=geo,
               noise=noise)
    if out_dir:
        os.makedirs(os.path.join(out_dir, "CosyVoice-BlankEN"), exist_ok=True)
        torch.save(llm, os.path.join(out_dir, "llm.pt"))
        torch.save(flow, os.path.join(out_dir, "flow.pt"))
        torch.save(hift, os.path.join(out_dir, "hift.pt"))
        if noise is not None:
            torch.save(noise, os.path.join(out_dir, "flow_noise.pt"))
        with open(os.path.join(out_dir, "CosyVoice-BlankEN", "config.json"), "w") as fh:
            json.dump(out["qwen2_config"], fh, indent=2)
        with open(os.path.join(out_dir, "geometry.json"), "w") as fh:
            json.dump(geo, fh, indent=2)
    log(f"export_pt: {model} -> {out_dir or '(memory)'}: llm.pt {len(llm)} keys, flow.pt {len(flow)} "
        f"keys, hift.pt {len(hift)} keys ({n_wn} weight-normed convs un-folded), {dtype}")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="libcosyvoice model file (.gguf)")
    ap.add_argument("out_dir", help="directory for llm.pt, flow.pt, hift.pt, CosyVoice-BlankEN/")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                    help="storage type of the LLM and flow tensors in the .pt files (default f32; "
                         "the official modules are fp32 either way, load_state_dict converts)")
    a = ap.parse_args(argv)
    try:
        export(a.model, a.out_dir, a.dtype)
    except (OSError, ValueError, KeyError) as exc:
        print(f"export_pt.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
