#!/usr/bin/env python3
"""Tests of the model-file tools: the converter (python/cosyvoice/convert; tools/convert.py,
cosyvoice-convert), its checkpoint reader ptread, tools/make_model.py.

    python3 tests/test_tools.py          (from any directory; exit status 1 on any failure)

The written files are parsed by a minimal GGUF reader written here (not the converter's gguf_writer), and
the expected values are computed here with their own code (name mapping, weight-norm folding in
float64, bf16 rounding, byte-to-unicode table), so a bug in the tools cannot hide behind itself.
Golden parts need the shared reference data (../shared or $COSY_SHARED) and are skipped with a
message when it is absent. Scratch files go to a temporary directory ($TMPDIR), removed at the
end when everything passed. Tolerances are stated where they are checked and the measured values
printed.
"""
import collections
import hashlib
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)
import ptread  # noqa: E402  (the checkpoint reader under test; also used to read checkpoints)

from script_tests import Skip, run_tests  # noqa: E402  (tests/script_tests.py)

SHARED = os.environ.get("COSY_SHARED") or os.path.join(ROOT, "..", "shared")
GOLDEN = os.path.join(SHARED, "golden")
SMALL = os.path.join(GOLDEN, "small")
TOKDIR = os.path.join(SHARED, "tokenizer")
HAVE_GOLDEN = os.path.isdir(SMALL) and os.path.isdir(TOKDIR)
TMP = tempfile.mkdtemp(prefix="cosy-test-tools-")



def need_golden():
    if not HAVE_GOLDEN:
        raise Skip(f"shared reference data not found at {SHARED} (set COSY_SHARED)")


def say(msg):
    print("   " + msg, flush=True)


def run(args):
    p = subprocess.run([sys.executable] + args, cwd=ROOT, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# ------------------------------------------------------------------------------------------------
# an independent minimal GGUF v3 reader

GGML = {0: ("f32", "<f4", 4), 1: ("f16", "<f2", 2), 26: ("i32", "<i4", 4), 30: ("bf16", "<u2", 2)}
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}


class Gguf:
    """kv: key -> (type, value) with type an int, or ("array", element type) for arrays;
    tensors: name -> (torch-order shape, ggml type, offset). Checks the layout as it goes."""

    def __init__(self, path):
        with open(path, "rb") as fh:
            self.buf = fh.read()
        self.pos = 0
        assert self._take(4) == b"GGUF", f"{path}: bad magic"
        self.version = self._u32()
        assert self.version == 3, f"{path}: GGUF version {self.version}"
        nt, nkv = self._u64(), self._u64()
        self.kv = collections.OrderedDict()
        for _ in range(nkv):
            k = self._str()
            assert k not in self.kv, f"duplicate key {k}"
            t = self._u32()
            if t == 9:
                et, n = self._u32(), self._u64()
                self.kv[k] = (("array", et), [self._val(et) for _ in range(n)])
            else:
                self.kv[k] = (t, self._val(t))
        self.tensors = collections.OrderedDict()
        for _ in range(nt):
            name = self._str()
            nd = self._u32()
            ne = [self._u64() for _ in range(nd)]
            ty, off = self._u32(), self._u64()
            assert name not in self.tensors, f"duplicate tensor {name}"
            self.tensors[name] = (tuple(reversed(ne)), ty, off)
        al = self.kv["general.alignment"][1] if "general.alignment" in self.kv else 32
        self.data = (self.pos + al - 1) // al * al
        assert all(b == 0 for b in self.buf[self.pos:self.data]), "non-zero header padding"
        end = 0
        for name, (shape, ty, off) in sorted(self.tensors.items(), key=lambda x: x[1][2]):
            assert off % al == 0, f"{name}: offset {off} not aligned"
            assert off >= end, f"{name}: overlaps the previous tensor"
            end = off + int(np.prod(shape)) * GGML[ty][2]
        assert self.data + end <= len(self.buf), "tensor data beyond the end of the file"

    def _take(self, n):
        assert self.pos + n <= len(self.buf), "truncated"
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def _u32(self):
        return struct.unpack("<I", self._take(4))[0]

    def _u64(self):
        return struct.unpack("<Q", self._take(8))[0]

    def _str(self):
        return self._take(self._u64()).decode("utf-8")

    def _val(self, t):
        if t == 8:
            return self._str()
        f = SCALARS[t]
        return struct.unpack(f, self._take(struct.calcsize(f)))[0]

    def raw(self, name):
        """The stored elements: float32 / float16 / int32 arrays, bf16 as uint16 bit patterns."""
        shape, ty, off = self.tensors[name]
        return np.frombuffer(self.buf, dtype=GGML[ty][1], count=int(np.prod(shape)),
                             offset=self.data + off).reshape(shape)

    def dtype(self, name):
        return GGML[self.tensors[name][1]][0]

    def value(self, key):
        return self.kv[key][1]


# ------------------------------------------------------------------------------------------------
# independent expectations

def fold(g, v):
    """weight norm, dim 0: g * v / ||v|| with the norm over all but dim 0, in float64."""
    v = np.asarray(v, dtype=np.float64)
    out = np.empty_like(v)
    gf = np.asarray(g, dtype=np.float64).reshape(-1)
    for o in range(v.shape[0]):
        row = v[o]
        out[o] = gf[o] * row / np.sqrt(np.sum(row * row))
    return out


def bf16_nearest_even(x):
    """float32 -> bf16 bit patterns: the nearer of the two neighbouring bf16 values (compared in
    float64), ties to the even one. Finite inputs only."""
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    bits = x.view(np.uint32)
    lo = (bits >> 16).astype(np.uint32)
    lo_f = (lo << 16).view(np.float32).astype(np.float64)
    hi_f = ((lo + 1) << 16).view(np.float32).astype(np.float64)
    xf = x.astype(np.float64)
    dlo, dhi = np.abs(xf - lo_f), np.abs(hi_f - xf)
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (lo % 2 == 1))
    return np.where(pick_hi, lo + 1, lo).astype(np.uint16)


def gpt2_byte_tokens():
    """The 256 byte-level tokens in GPT-2 id order: printable Latin-1 bytes map to themselves (in
    byte order), the other 68 bytes to U+0100.. in byte order, listed after them."""
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF]
    rest = [b for b in range(256) if b not in printable]
    return [chr(b) for b in printable] + [chr(0x100 + i) for i in range(len(rest))]


def expected_names(sds):
    """checkpoint state_dicts -> {file name: (float64 or float32 array, folded?)}"""
    out = {}
    for k, t in sds["llm.pt"].items():
        if k == "llm.model.lm_head.weight":
            continue
        if k.startswith("llm.model.model."):
            out["llm." + k[len("llm.model.model."):]] = (t.array, False)
        else:
            out["llm." + k] = (t.array, False)
    for k, t in sds["flow.pt"].items():
        if k.endswith("rotary_embed.inv_freq"):
            continue
        if k.startswith("decoder.estimator."):
            out["flow.dit." + k[len("decoder.estimator."):]] = (t.array, False)
        else:
            out["flow." + k] = (t.array, False)
    hift = sds["hift.pt"]
    for k, t in hift.items():
        assert k.startswith("generator."), k
        k = k[len("generator."):]
        if k.endswith(".parametrizations.weight.original0"):
            base = k[: -len(".parametrizations.weight.original0")]
            v = hift["generator." + base + ".parametrizations.weight.original1"].array
            out["hift." + base + ".weight"] = (fold(t.array, v), True)
        elif k.endswith(".parametrizations.weight.original1"):
            continue
        else:
            out["hift." + k] = (t.array, False)
    return out


def small_expected_keys(dtype, sds):
    emb = sds["llm.pt"]["llm.model.model.embed_tokens.weight"].array
    q0 = sds["llm.pt"]["llm.model.model.layers.0.self_attn.q_proj.weight"].array
    k0 = sds["llm.pt"]["llm.model.model.layers.0.self_attn.k_proj.weight"].array
    with open(os.path.join(GOLDEN, "manifest.json"), encoding="utf-8") as fh:
        dims = json.load(fh)["dims"]
    cp = sds["flow.pt"]["decoder.estimator.input_embed.conv_pos_embed.conv1.0.weight"].array
    assert emb.shape == (dims["text_vocab"], dims["llm_hidden"]) and q0.shape[0] == 64 * dims["llm_heads"]
    assert k0.shape[0] == 64 * dims["llm_kv_heads"] and cp.shape == (dims["dit_dim"], dims["dit_dim"] // 16, 31)
    U, F, S, A = 4, 6, 8, ("array", 4)
    return {
        "general.alignment": (U, 32), "general.architecture": (S, "cosyvoice3"),
        "general.name": (S, "Fun-CosyVoice3-0.5B"), "cosyvoice.format_version": (U, 1),
        "cosyvoice.weight_dtype": (S, dtype),
        "cosyvoice.llm.hidden_size": (U, dims["llm_hidden"]), "cosyvoice.llm.n_layers": (U, dims["llm_layers"]),
        "cosyvoice.llm.n_heads": (U, dims["llm_heads"]), "cosyvoice.llm.n_kv_heads": (U, dims["llm_kv_heads"]),
        "cosyvoice.llm.head_dim": (U, 64), "cosyvoice.llm.intermediate_size": (U, dims["llm_inter"]),
        "cosyvoice.llm.text_vocab_size": (U, dims["text_vocab"]), "cosyvoice.llm.speech_vocab_size": (U, 6761),
        "cosyvoice.llm.speech_token_size": (U, 6561), "cosyvoice.llm.rope_theta": (F, 1e6),
        "cosyvoice.llm.rms_norm_eps": (F, 1e-6),
        "cosyvoice.flow.mel_dim": (U, 80), "cosyvoice.flow.spk_embed_dim": (U, 192),
        "cosyvoice.flow.vocab_size": (U, 6561), "cosyvoice.flow.pre_lookahead_len": (U, 3),
        "cosyvoice.flow.pre_channels": (U, dims["pre_channels"]), "cosyvoice.flow.dit_dim": (U, dims["dit_dim"]),
        "cosyvoice.flow.dit_depth": (U, dims["dit_depth"]), "cosyvoice.flow.dit_heads": (U, dims["dit_heads"]),
        "cosyvoice.flow.dit_head_dim": (U, dims["dit_dim_head"]),
        "cosyvoice.flow.dit_ff_dim": (U, dims["dit_dim"] * dims["dit_ff_mult"]),
        "cosyvoice.flow.conv_pos_kernel": (U, 31), "cosyvoice.flow.conv_pos_groups": (U, 16),
        "cosyvoice.flow.static_chunk_size": (U, 50), "cosyvoice.flow.token_mel_ratio": (U, 2),
        "cosyvoice.flow.n_timesteps": (U, 10), "cosyvoice.flow.noise_frames": (U, 15000),
        "cosyvoice.flow.cfg_rate": (F, 0.7),
        "cosyvoice.hift.base_channels": (U, dims["hift_base"]), "cosyvoice.hift.cond_channels": (U, dims["hift_cond"]),
        "cosyvoice.hift.nb_harmonics": (U, 8), "cosyvoice.hift.sample_rate": (U, 24000),
        "cosyvoice.hift.istft_n_fft": (U, 16), "cosyvoice.hift.istft_hop": (U, 4),
        "cosyvoice.hift.conv_pre_look_right": (U, 4),
        "cosyvoice.hift.upsample_rates": (A, [8, 5, 3]), "cosyvoice.hift.upsample_kernel_sizes": (A, [16, 11, 7]),
        "cosyvoice.hift.resblock_kernel_sizes": (A, [3, 7, 11]), "cosyvoice.hift.resblock_dilations": (A, [1, 3, 5]),
        "cosyvoice.hift.source_resblock_kernel_sizes": (A, [7, 7, 11]),
        "cosyvoice.hift.nsf_alpha": (F, 0.1), "cosyvoice.hift.nsf_sigma": (F, 0.003),
        "cosyvoice.hift.voiced_threshold": (F, 10.0), "cosyvoice.hift.lrelu_slope": (F, 0.1),
        "cosyvoice.hift.audio_limit": (F, 0.99),
        "tokenizer.ggml.model": (S, "gpt2"), "tokenizer.ggml.pre": (S, "qwen2"),
        "tokenizer.ggml.eos_token_id": (U, 151643), "cosyvoice.tokenizer.endofprompt_id": (U, 151646),
        # the arrays are checked by check_tokenizer
        "tokenizer.ggml.tokens": (("array", 8), None), "tokenizer.ggml.token_type": (("array", 5), None),
        "tokenizer.ggml.merges": (("array", 8), None),
    }


def check_keys(g, want):
    missing = sorted(set(want) - set(g.kv))
    extra = sorted(set(g.kv) - set(want))
    assert not missing and not extra, f"keys missing {missing}, unexpected {extra}"
    for k, (t, v) in want.items():
        ft, fv = g.kv[k]
        assert ft == t, f"key {k}: type {ft}, expected {t}"
        if v is None:
            continue
        if t == 6:
            assert fv == float(np.float32(v)), f"key {k}: {fv} != float32({v})"
        else:
            assert fv == v, f"key {k}: {fv!r} != {v!r}"


def check_tokenizer(g):
    """tokens / types / merges / special ids against vocab.json, tokenizer_config.json,
    added_tokens.json (whose ids are checked against the positions) and merges.txt."""
    with open(os.path.join(TOKDIR, "vocab.json"), encoding="utf-8") as fh:
        vocab = json.load(fh)
    with open(os.path.join(TOKDIR, "tokenizer_config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    with open(os.path.join(TOKDIR, "added_tokens.json"), encoding="utf-8") as fh:
        added = json.load(fh)
    with open(os.path.join(TOKDIR, "merges.txt"), encoding="utf-8", newline="") as fh:
        lines = fh.read().split("\n")
    merges = [ln for ln in lines if ln and not ln.startswith("#version")]
    toks = [None] * len(vocab)
    for s, i in vocab.items():
        toks[i] = s
    types = [1] * len(toks)
    for i in sorted(cfg["added_tokens_decoder"], key=int):
        assert int(i) == len(toks)
        toks.append(cfg["added_tokens_decoder"][i]["content"])
        types.append(3)
    for e in added["additional_special_tokens"]:
        if e["content"] in toks:
            assert toks.index(e["content"]) == e["id"], e
            continue
        assert e["id"] == len(toks), f"{e} would get id {len(toks)}"
        toks.append(e["content"])
        types.append(4)
    ft = g.value("tokenizer.ggml.tokens")
    assert ft == toks, f"tokens differ (file {len(ft)}, expected {len(toks)})"
    assert g.value("tokenizer.ggml.token_type") == types, "token types differ"
    assert g.value("tokenizer.ggml.merges") == merges, "merges differ"
    assert g.value("tokenizer.ggml.eos_token_id") == added["eos_id"] == toks.index("<|endoftext|>")
    assert g.value("cosyvoice.tokenizer.endofprompt_id") == toks.index("<|endofprompt|>") == 151646
    say(f"tokenizer: {len(toks)} tokens ({len(vocab)} BPE, {types.count(3)} control, "
        f"{types.count(4)} added), {len(merges)} merges: equal to the tokenizer files")


def check_noise(g):
    z = g.raw("flow.noise")
    assert g.dtype("flow.noise") == "f32" and z.shape == (80, 15000), z.shape
    rows = np.load(os.path.join(GOLDEN, "flow", "noise_rows.npy"))
    d = float(np.abs(z[:, :rows.shape[1]] - rows).max())
    say(f"flow.noise vs golden/flow/noise_rows.npy {rows.shape}: max abs {d:.2e} (tolerance 2e-6)")
    assert d <= 2e-6
    # torch's printed values (7 decimals, docs/model-format.md section 6): tolerance 1e-6 per value, 2e-3 on the fp64 sum
    # of all 1.2M values (one or two float32 ulps per value, random signs)
    r0 = [-1.1258398, -1.1523602, -0.2505786, -0.4338788, 0.8487104]
    r1 = [0.8691794, 0.5761968, -0.4119531]
    d0 = max(float(np.abs(z[0, :5] - r0).max()), float(np.abs(z[1, :3] - r1).max()))
    ds = abs(float(z.astype(np.float64).sum()) - (-1291.2013939))
    say(f"flow.noise vs torch's printed values: max abs {d0:.1e} (tolerance 1e-6), "
        f"sum off by {ds:.1e} (tolerance 2e-3)")
    assert d0 <= 1e-6 and ds <= 2e-3


def load_golden_sds():
    return {fn: ptread.load(os.path.join(SMALL, fn)) for fn in ("llm.pt", "flow.pt", "hift.pt")}


_converted = {}


def convert_small(dtype):
    if dtype not in _converted:
        out = os.path.join(TMP, f"small-{dtype}.gguf")
        rc, so, se = run([os.path.join(TOOLS, "convert.py"), SMALL, "-o", out, "--dtype", dtype,
                          "--tokenizer", TOKDIR, "--added-tokens", os.path.join(TOKDIR, "added_tokens.json"),
                          "--no-text-grammars"])  # the text grammar keys are checked by test_text
        assert rc == 0, f"convert.py failed ({rc}): {se}"
        _converted[dtype] = out
    return _converted[dtype]


# ------------------------------------------------------------------------------------------------
# tests

def test_convert_roundtrip():
    """convert golden/small with --dtype f32 and bf16; every tensor, key and tokenizer entry."""
    need_golden()
    sds = load_golden_sds()
    want = expected_names(sds)
    for dtype in ("f32", "bf16"):
        g = Gguf(convert_small(dtype))
        names = set(g.tensors)
        assert names == set(want) | {"flow.noise"}, \
            f"tensor set differs: missing {sorted(set(want) - names)[:5]}, extra {sorted(names - set(want))[:5]}"
        n_exact = n_fold = n_bf = 0
        worst_ulps = 0
        for name, (ref, folded) in want.items():
            a = g.raw(name)
            assert a.shape == ref.shape, f"{name}: shape {a.shape}, expected {ref.shape}"
            low = dtype == "bf16" and ref.ndim >= 2 and name.split(".")[0] in ("llm", "flow")
            assert g.dtype(name) == ("bf16" if low else "f32"), f"{name}: stored as {g.dtype(name)}"
            ref32 = np.asarray(ref, dtype=np.float32)
            if low:
                assert np.array_equal(a, bf16_nearest_even(ref32).reshape(a.shape)), \
                    f"{name}: bf16 bits are not round-to-nearest-even of the checkpoint value"
                n_bf += 1
            elif folded:
                # 1 float32 ulp: converter and test both fold in float64 but may sum in another order
                ulp = np.spacing(np.abs(ref32))
                err = np.abs(a.astype(np.float64) - ref32.astype(np.float64))
                worst_ulps = max(worst_ulps, float((err / ulp).max()))
                assert (err <= ulp).all(), f"{name}: folded weight off by more than 1 ulp"
                n_fold += 1
            else:
                assert np.array_equal(a.view(np.uint32), ref32.view(np.uint32)), f"{name}: not bit-exact"
                n_exact += 1
        say(f"{dtype}: {len(want)} tensors + flow.noise: {n_exact} bit-exact, {n_bf} bf16 RNE-exact, "
            f"{n_fold} folded weight-norm tensors within {worst_ulps:.2f} ulp (tolerance 1 ulp)")
        check_keys(g, small_expected_keys(dtype, sds))
        say(f"{dtype}: all {len(g.kv)} keys have the expected types and values")
        if dtype == "f32":
            check_tokenizer(g)
            check_noise(g)
        else:
            g32 = Gguf(convert_small("f32"))
            for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"):
                assert g.value(k) == g32.value(k)
            assert np.array_equal(g.raw("flow.noise"), g32.raw("flow.noise"))


def test_ptread_sha():
    """ptread's tensors hash to the sha256 values of golden/small/tensors.json.

    The sha256 there covers the tensor's elements in its own dtype, C order, little-endian (bf16:
    the 2-byte bit patterns), i.e. the bytes of tensor.contiguous() - not the whole (possibly
    shared) storage: the tied lm_head shares embed_tokens' storage and hashes the same."""
    need_golden()
    with open(os.path.join(SMALL, "tensors.json"), encoding="utf-8") as fh:
        table = json.load(fh)
    n = 0
    for fn in ("llm.pt", "flow.pt", "hift.pt"):
        sd = ptread.load(os.path.join(SMALL, fn))
        assert list(sd) == list(table[fn]), f"{fn}: tensor names/order differ from tensors.json"
        for k, t in sd.items():
            e = table[fn][k]
            a = np.ascontiguousarray(t.array)
            assert list(a.shape) == e["shape"] and t.dtype_name == e["dtype"], (k, a.shape, t.dtype_name)
            if t.dtype_name == "bfloat16":
                bits = a.astype(np.float32).view(np.uint32)
                assert not (bits & 0xFFFF).any(), f"{k}: bf16 value with low bits set"
                raw = (bits >> 16).astype("<u2").tobytes()
            else:
                raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
            assert hashlib.sha256(raw).hexdigest() == e["sha256"], f"{fn}: {k}: sha256 differs"
            n += 1
    say(f"{n} checkpoint tensors: shape, dtype and sha256 of the contiguous little-endian bytes "
        f"(bf16 as 16-bit patterns) equal tensors.json")


# ---- a torch.save-format writer (zip + pickle protocol 2), as the converter's ptread documents -------

class _Global:
    """A reference to module.name, pickled as the GLOBAL opcode without importing anything."""

    def __init__(self, module, name):
        self.module, self.name = module, name

    def __call__(self, *args):
        raise TypeError("marker only")


class _Storage:
    def __init__(self, key, stype, numel):
        self.key, self.stype, self.numel = key, stype, numel


class _Tensor:
    def __init__(self, storage, shape):
        self.storage, self.shape = storage, tuple(shape)

    def __reduce__(self):
        stride, s = [], 1
        for d in reversed(self.shape):
            stride.insert(0, s)
            s *= d
        return (_Global("torch._utils", "_rebuild_tensor_v2"),
                (self.storage, 0, self.shape, tuple(stride), False, collections.OrderedDict()))


class _TorchPickler(pickle._Pickler):
    dispatch = dict(pickle._Pickler.dispatch)

    def _save_global_ref(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())

    dispatch[_Global] = _save_global_ref

    def persistent_id(self, obj):
        if isinstance(obj, _Storage):
            return ("storage", _Global("torch", obj.stype), obj.key, "cpu", obj.numel)
        return None


def write_pt(path, tensors):
    """tensors: name -> (numpy array, torch dtype name as in ptread: float32 / bfloat16 / int64)."""
    stypes = {"float32": ("FloatStorage", "<f4"), "bfloat16": ("BFloat16Storage", None),
              "int64": ("LongStorage", "<i8")}
    sd = collections.OrderedDict()
    blobs = {}
    for i, (name, (arr, dt)) in enumerate(tensors.items()):
        stype, npd = stypes[dt]
        arr = np.ascontiguousarray(arr)
        if dt == "bfloat16":
            raw = (arr.astype(np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raw = arr.astype(npd).tobytes()
        key = str(i)
        blobs[key] = raw
        sd[name] = _Tensor(_Storage(key, stype, arr.size), arr.shape)
    bio = io.BytesIO()
    _TorchPickler(bio, protocol=2).dump(sd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", bio.getvalue())
        for key, raw in blobs.items():
            zf.writestr(f"archive/data/{key}", raw)
        zf.writestr("archive/version", "3\n")


def as_plain(sd):
    return collections.OrderedDict((k, (t.array, t.dtype_name)) for k, t in sd.items())


def convert_dir(files):
    """A model dir: name -> path to link or dict to write; -> (rc, stderr, output path)."""
    d = tempfile.mkdtemp(dir=TMP)
    for fn, src in files.items():
        if isinstance(src, str):
            os.symlink(os.path.abspath(src), os.path.join(d, fn))
        else:
            write_pt(os.path.join(d, fn), src)
    out = os.path.join(d, "out.gguf")
    rc, so, se = run([os.path.join(TOOLS, "convert.py"), d, "-o", out, "--dtype", "f32",
                      "--tokenizer", TOKDIR, "--added-tokens", os.path.join(TOKDIR, "added_tokens.json"),
                          "--no-text-grammars"])  # the text grammar keys are checked by test_text
    return rc, se, out


def test_convert_errors():
    """broken checkpoint dirs -> exit status 1 and a message naming the problem."""
    need_golden()
    llm, flow, hift = (os.path.join(SMALL, f) for f in ("llm.pt", "flow.pt", "hift.pt"))
    sds = load_golden_sds()
    # the test's writer reproduces the golden file faithfully: same conversion, byte for byte
    rc, se, out = convert_dir({"llm.pt": llm, "flow.pt": as_plain(sds["flow.pt"]), "hift.pt": hift})
    assert rc == 0, se
    with open(out, "rb") as a, open(convert_small("f32"), "rb") as b:
        assert a.read() == b.read(), "rewritten flow.pt converts differently"
    say("a flow.pt rewritten by the test's torch-format writer converts to the identical file")
    cases = []
    cases.append(("missing hift.pt", {"llm.pt": llm, "flow.pt": flow}, ["hift.pt", "not found"]))
    f2 = as_plain(sds["flow.pt"])
    del f2["decoder.estimator.transformer_blocks.1.attn.to_k.bias"]
    cases.append(("flow.pt without a tensor", {"llm.pt": llm, "flow.pt": f2, "hift.pt": hift},
                  ["flow.pt", "decoder.estimator.transformer_blocks.1.attn.to_k.bias", "missing"]))
    l2 = as_plain(sds["llm.pt"])
    del l2["llm.model.model.norm.weight"]
    cases.append(("llm.pt without a tensor", {"llm.pt": l2, "flow.pt": flow, "hift.pt": hift},
                  ["llm.pt", "llm.model.model.norm.weight", "missing"]))
    f3 = as_plain(sds["flow.pt"])
    k = "decoder.estimator.transformer_blocks.0.attn.to_v.weight"
    f3[k] = (np.zeros((128, 129), np.float32), "float32")
    cases.append(("flow.pt tensor of a wrong shape", {"llm.pt": llm, "flow.pt": f3, "hift.pt": hift},
                  ["flow.pt", k, "[128, 128]", "[128, 129]"]))
    h2 = as_plain(sds["hift.pt"])
    k = "generator.resblocks.4.convs2.1.parametrizations.weight.original1"
    a = h2[k][0]
    h2[k] = (np.ones(a.shape[:2] + (a.shape[2] + 2,), np.float32), "float32")
    cases.append(("hift.pt tensor of a wrong shape", {"llm.pt": llm, "flow.pt": flow, "hift.pt": h2},
                  ["hift.pt", "resblocks.4.convs2.1.weight", str(list(a.shape))]))
    for what, files, words in cases:
        rc, se, _ = convert_dir(files)
        msg = se.strip().splitlines()[-1] if se.strip() else ""
        assert rc == 1, f"{what}: exit status {rc}, expected 1 ({se})"
        assert "Traceback" not in se, f"{what}: a traceback instead of a message: {se}"
        for w in words:
            assert w in msg, f"{what}: message {msg!r} does not name {w!r}"
        say(f"{what}: exit 1, {msg}")


def test_bf16_rounding():
    """--dtype bf16 rounds to nearest even (the golden weights are bf16-exact, so this uses others)."""
    need_golden()
    rng = np.random.default_rng(3)
    f = as_plain(load_golden_sds()["flow.pt"])
    for k, (a, dt) in f.items():
        if a.ndim >= 2:
            b = (a.astype(np.float64) * (1 + 1e-3 * rng.standard_normal(a.shape))).astype(np.float32)
            bits = b.reshape(-1).view(np.uint32)
            bits[:64] = (bits[:64] & 0xFFFF0000) | 0x8000          # exact ties, odd and even
            bits[64:128] = (bits[64:128] & 0xFFFF0000) | 0x7FFF
            f[k] = (b, dt)
    rc, se, out = convert_dir({"llm.pt": os.path.join(SMALL, "llm.pt"), "flow.pt": f,
                               "hift.pt": os.path.join(SMALL, "hift.pt")})
    assert rc == 0, se
    # convert_dir writes f32; convert this dir again as bf16
    d = os.path.dirname(out)
    out16 = os.path.join(d, "out16.gguf")
    rc, so, se = run([os.path.join(TOOLS, "convert.py"), d, "-o", out16, "--dtype", "bf16",
                      "--tokenizer", TOKDIR, "--added-tokens", os.path.join(TOKDIR, "added_tokens.json"),
                          "--no-text-grammars"])  # the text grammar keys are checked by test_text
    assert rc == 0, se
    g, g32 = Gguf(out16), Gguf(out)
    n = ties = 0
    for k, (a, dt) in f.items():
        name = "flow.dit." + k[len("decoder.estimator."):] if k.startswith("decoder.estimator.") else "flow." + k
        if name not in g.tensors:
            continue
        assert np.array_equal(g32.raw(name).reshape(-1).view(np.uint32), a.reshape(-1).view(np.uint32)), name
        if a.ndim >= 2:
            assert g.dtype(name) == "bf16"
            assert np.array_equal(g.raw(name).reshape(-1), bf16_nearest_even(a)), f"{name}: not RNE"
            n += a.size
            ties += 64
    say(f"{n} perturbed flow weights ({ties} exact ties) stored as round-to-nearest-even bf16")


def test_make_model():
    """make_model.py --preset small / demo: same tensor table as the converted golden model."""
    mm = os.path.join(TOOLS, "make_model.py")
    demo = os.path.join(TMP, "demo.gguf")
    voice = os.path.join(TMP, "demo-voice.gguf")
    rc, so, se = run([mm, "--preset", "demo", "-o", demo, "--voice", voice, "--seed", "7"])
    assert rc == 0, se
    say(so.strip().replace("\n", "\n   "))
    gd = Gguf(demo)
    # determinism: the same seed gives the same bytes, another seed other weights
    demo2 = os.path.join(TMP, "demo2.gguf")
    assert run([mm, "--preset", "demo", "-o", demo2, "--seed", "7"])[0] == 0
    with open(demo, "rb") as a, open(demo2, "rb") as b:
        assert a.read() == b.read(), "same seed, different file"
    assert run([mm, "--preset", "demo", "-o", demo2, "--seed", "8"])[0] == 0
    g8 = Gguf(demo2)
    assert not np.array_equal(g8.raw("llm.layers.0.mlp.up_proj.weight"), gd.raw("llm.layers.0.mlp.up_proj.weight"))
    say("same seed -> identical file; another seed -> other weights")

    # demo tokenizer
    toks = gd.value("tokenizer.ggml.tokens")
    types = gd.value("tokenizer.ggml.token_type")
    merges = gd.value("tokenizer.ggml.merges")
    assert toks[:256] == gpt2_byte_tokens(), "the first 256 tokens are not the GPT-2 byte tokens"
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|endofprompt|>", "[breath]", "[laughter]"]
    assert toks[-6:] == specials and types[-6:] == [3, 3, 3, 4, 4, 4], (toks[-6:], types[-6:])
    assert types[:-6] == [1] * (len(toks) - 6)
    assert len(set(toks)) == len(toks), "duplicate tokens"
    assert 200 <= len(merges) <= 1000, f"{len(merges)} merges"
    tokset = set(toks[:-6])
    for m in merges:
        parts = m.split(" ")
        assert len(parts) == 2 and parts[0] in tokset and parts[1] in tokset and parts[0] + parts[1] in tokset, m
    assert set(toks[256:-6]) <= {m.replace(" ", "") for m in merges}, "a BPE token no merge makes"
    V = gd.value("cosyvoice.llm.text_vocab_size")
    assert V % 64 == 0 and len(toks) <= V < len(toks) + 64, (V, len(toks))
    assert gd.tensors["llm.embed_tokens.weight"][0] == (V, 128)
    assert gd.value("tokenizer.ggml.eos_token_id") == toks.index("<|endoftext|>")
    assert gd.value("cosyvoice.tokenizer.endofprompt_id") == toks.index("<|endofprompt|>")
    say(f"demo tokenizer: 256 byte tokens + {len(toks) - 262} merged + 6 specials, {len(merges)} merges "
        f"(each joins two known tokens), text vocab {V}")

    # demo voice file
    gv = Gguf(voice)
    assert gv.value("general.architecture") == "cosyvoice3-voice"
    assert gv.kv["cosyvoice.voice.format_version"] == (4, 1)
    assert gv.value("cosyvoice.voice.prompt_text") == "You are a helpful assistant.<|endofprompt|>Hello."
    assert {n: (s, gv.dtype(n)) for n, (s, _, _) in gv.tensors.items()} == {
        "voice.speech_tokens": ((50,), "i32"), "voice.mel": ((100, 80), "f32"),
        "voice.speaker_embedding": ((192,), "f32")}
    t, mel = gv.raw("voice.speech_tokens"), gv.raw("voice.mel")
    assert t.min() >= 0 and t.max() < 6561 and mel.min() >= -10 and mel.max() <= 2 and mel.std() > 1
    say("demo voice: 50 tokens in [0, 6561), mel [100][80] in [-10, 2], speaker embedding [192]")

    # weights: no NaN, bf16 where the converter puts it, not constant
    for n in gd.tensors:
        a = gd.raw(n)
        f = ptread.bf16_to_f32(a) if gd.dtype(n) == "bf16" else a
        assert np.isfinite(f).all(), n
    if not HAVE_GOLDEN:
        raise Skip(f"the comparison with the converted golden model needs {SHARED}")
    small = os.path.join(TMP, "small-rand.gguf")
    rc, so, se = run([mm, "--preset", "small", "-o", small, "--tokenizer", TOKDIR])
    assert rc == 0, se
    ref = Gguf(convert_small("bf16"))
    for path, what in ((small, "small"), (demo, "demo")):
        g = Gguf(path)
        assert list(g.tensors) == list(ref.tensors), f"{what}: tensor names/order differ"
        for n, (shape, ty, off) in ref.tensors.items():
            s2 = g.tensors[n][0]
            if what == "demo" and n == "llm.embed_tokens.weight":
                assert s2[1:] == shape[1:]
                continue
            assert s2 == shape and g.tensors[n][1] == ty, f"{what}: {n}: {s2} {g.tensors[n][1]} vs {shape} {ty}"
        # the optional text grammar keys (packed when the wetext wheel is installed) aside
        kk = {k for k in g.kv if not k.startswith("cosyvoice.text.")}
        kr = {k for k in ref.kv if not k.startswith("cosyvoice.text.")}
        assert kk == kr, f"{what}: keys differ: {kk ^ kr}"
        varying = {"general.name", "cosyvoice.llm.text_vocab_size", "tokenizer.ggml.tokens",
                   "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id",
                   "cosyvoice.tokenizer.endofprompt_id"}
        for k in ref.kv:
            if what == "small" or k not in varying:
                if k != "general.name":
                    assert g.kv[k] == ref.kv[k], f"{what}: key {k}: {g.kv[k]} vs {ref.kv[k]}"
        assert np.array_equal(g.raw("flow.noise"), ref.raw("flow.noise"))
        say(f"make_model --preset {what}: {len(g.tensors)} tensors with the converted golden model's "
            f"names, shapes and dtypes; keys equal{' (but the tokenizer)' if what == 'demo' else ''}")


def test_numpy_hift():
    """make_model's numpy HiFT (used to calibrate the random HiFT) against golden/hift."""
    need_golden()
    import convert
    import make_model as mm
    W, _, _ = convert.map_hift(ptread.load(os.path.join(SMALL, "hift.pt")))
    H = os.path.join(GOLDEN, "hift")
    mel = np.load(os.path.join(H, "mel_in.npy"))
    ri, sw = np.load(os.path.join(H, "rand_ini.npy")), np.load(os.path.join(H, "sine_waves.npy"))
    f0 = mm.f0_predict(W, mel)
    e_f0 = float(np.abs(f0 - np.load(os.path.join(H, "final", "f0_f64.npy"))).max())
    s = mm.source(W, f0.astype(np.float32), ri, sw)
    e_s = float(np.abs(s - np.load(os.path.join(H, "final", "s.npy"))).max())
    wav_ref = np.load(os.path.join(H, "final", "wav.npy"))
    e_dec = float(np.abs(mm.decode(W, mel, np.load(os.path.join(H, "final", "s.npy"))) - wav_ref).max())
    e_wav = float(np.abs(mm.hift_forward(W, mel, ri, sw)[0] - wav_ref).max())
    # tolerances: the GPU-vs-CPU torch spreads measured with the golden data (f0 1.9e-5, s 8.9e-5, wav given s 1.2e-4,
    # wav 1.4e-2) with headroom: our float64 differs from torch's float32 in rounding only
    say(f"numpy HiFT vs golden: f0 {e_f0:.1e} Hz (tol 1e-4), s {e_s:.1e} (tol 5e-4), "
        f"wav given golden s {e_dec:.1e} (tol 5e-4), wav {e_wav:.1e} (tol 3e-2) max abs")
    assert e_f0 <= 1e-4 and e_s <= 5e-4 and e_dec <= 5e-4 and e_wav <= 3e-2


def test_hift_fp16_emulation():
    """the vocoder's operand roundings emulated in numpy on golden/hift: fp16 (COSY_HPREC_F16) vs TF32."""
    # kernels/conv.cu's F16 conv2_kernel rounds each conv's activations to fp16 (to nearest even,
    # saturated at +-65504) and its weights to fp16 after a per-output-channel power of two that
    # puts the channel's largest |w| in [0.5, 1); the TF32 kernels round both to TF32 (to nearest,
    # ties away). Emulated here on make_model's float64 HiFT (sums exact): the decode of the golden
    # final call must stay within the GPU's golden tolerance (2e-2, tests/test_gpu_hift.c) and
    # within 1.5x of TF32's error, and the largest conv input must stay far below 65504.
    need_golden()
    import convert
    import make_model as mm
    W, _, _ = convert.map_hift(ptread.load(os.path.join(SMALL, "hift.pt")))
    H = os.path.join(GOLDEN, "hift")
    mel = np.load(os.path.join(H, "mel_in.npy"))
    s = np.load(os.path.join(H, "final", "s.npy"))
    gold = np.load(os.path.join(H, "final", "wav.npy"))

    def tf32(a):
        a = np.asarray(a, dtype=np.float32).copy()
        u = a.view(np.uint32)
        fin = (u & np.uint32(0x7f800000)) != np.uint32(0x7f800000)
        u[fin] = (u[fin] + np.uint32(0x1000)) & np.uint32(0xffffe000)
        return a.astype(np.float64)

    def f16_x(a):
        return np.clip(np.asarray(a, dtype=np.float32), -65504, 65504).astype(np.float16).astype(np.float64)

    def f16_w(w):
        w = np.asarray(w, dtype=np.float32)
        m = np.abs(w).reshape(w.shape[0], -1).max(axis=1)
        ex = np.where(m > 0, np.frexp(m)[1], 0)
        sc = np.ldexp(1.0, ex)[:, None, None]
        return (w / sc).astype(np.float16).astype(np.float64) * sc

    plain = mm._conv
    mode, xmax = [None], [0.0]

    def conv(x, w, b=None, dilation=1, stride=1):
        xmax[0] = max(xmax[0], float(np.abs(x).max()))
        if mode[0] == "tf32":
            x, w = tf32(x), tf32(w)
        elif mode[0] == "f16":
            x, w = f16_x(x), f16_w(w)
        return plain(x, w, b, dilation, stride)

    err = {}
    mm._conv = conv
    try:
        for m in ("tf32", "f16"):
            mode[0] = m
            y = mm.decode(W, mel, s)[: len(gold)]
            err[m] = float(np.linalg.norm(y - gold) / np.linalg.norm(gold))
    finally:
        mm._conv = plain
    say(f"emulated decode vs golden wav: TF32 {err['tf32']:.3e}, fp16 {err['f16']:.3e} rel L2 "
        f"(F16 / TF32 {err['f16'] / err['tf32']:.2f}); largest |conv input| {xmax[0]:.1f} (fp16 max 65504)")
    assert err["f16"] <= 2e-2 and err["f16"] <= 1.5 * err["tf32"], err
    assert xmax[0] < 65504 / 100, xmax[0]

# ------------------------------------------------------------------------------------------------
# front end (speech tokenizer v3 + CAM++): python/cosyvoice/convert/frontend.py

FE = os.path.join(ROOT, "tests", "data", "frontend")


def _bn_fold_ref(w, gamma, beta, mean, var, bias=None):
    """conv + BatchNorm(eval, eps 1e-5) folded, in float64 (this file's own code)."""
    s = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    b = np.zeros(w.shape[0]) if bias is None else bias.astype(np.float64)
    return w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1)), \
        b * s + beta.astype(np.float64) - mean.astype(np.float64) * s


def test_frontend_state_dicts():
    """front-end state dicts -> canonical tensors: names, shapes, BN folding, FSMN reshape; errors."""
    import frontend_convert as fc
    sd = ptread.load(os.path.join(FE, "s3tok_small.pt"))
    t, hp, hpf = fc.s3tok_from_state_dict(sd)
    assert hp == dict(n_mels=128, n_state=128, n_head=2, n_layer=2, fsmn_kernel=31), hp
    assert len(t) == 4 + 2 * 16 + 2, len(t)
    a = sd["encoder.blocks.1.attn.fsmn_block.weight"].array.astype(np.float32)
    assert np.array_equal(t["s3tok.blocks.1.attn.fsmn.weight"], a[:, 0, :])
    assert np.array_equal(t["s3tok.blocks.0.attn.query.weight"],
                          sd["encoder.blocks.0.attn.query.weight"].array.astype(np.float32))
    cd = ptread.load(os.path.join(FE, "campplus_small.pt"))
    c, hc, ha = fc.campplus_from_state_dict(cd)
    assert hc["growth_rate"] == 4 and hc["bn_channels"] == 16 and hc["init_channels"] == 16, hc
    assert ha["block_layers"] == [12, 24, 16], ha
    g = {k: v.array for k, v in cd.items()}
    w, b = _bn_fold_ref(g["head.layer1.0.shortcut.0.weight"], g["head.layer1.0.shortcut.1.weight"],
                        g["head.layer1.0.shortcut.1.bias"], g["head.layer1.0.shortcut.1.running_mean"],
                        g["head.layer1.0.shortcut.1.running_var"])
    e1 = np.abs(c["campplus.head.layer1.0.shortcut.weight"] - w).max() / np.abs(w).max()
    e2 = np.abs(c["campplus.head.layer1.0.shortcut.bias"] - b).max() / np.abs(b).max()
    # transit3 carries the out_nonlinear BN; the dense layer its affine-free BN
    p = "xvector.out_nonlinear.batchnorm."
    w3, b3 = _bn_fold_ref(g["xvector.transit3.linear.weight"][..., 0], g[p + "weight"], g[p + "bias"],
                          g[p + "running_mean"], g[p + "running_var"])
    e3 = np.abs(c["campplus.transit3.linear.bias"] - b3).max() / np.abs(b3).max()
    p = "xvector.dense.nonlinear.batchnorm."
    n = g[p + "running_mean"].shape[0]
    wd, bd = _bn_fold_ref(g["xvector.dense.linear.weight"][..., 0], np.ones(n), np.zeros(n),
                          g[p + "running_mean"], g[p + "running_var"])
    e4 = np.abs(c["campplus.dense.weight"] - wd).max() / np.abs(wd).max()
    bn = g["xvector.block2.tdnnd3.nonlinear1.batchnorm.weight"] / np.sqrt(
        g["xvector.block2.tdnnd3.nonlinear1.batchnorm.running_var"].astype(np.float64) + 1e-5)
    e5 = np.abs(c["campplus.block2.2.bn1.scale"] - bn).max() / np.abs(bn).max()
    say(f"BN folding vs float64: shortcut {e1:.1e}/{e2:.1e}, transit3 bias {e3:.1e}, dense {e4:.1e}, "
        f"bn scale {e5:.1e} (tol 1e-6 relative)")
    assert max(e1, e2, e3, e4, e5) <= 1e-6
    # errors name the problem
    bad = dict(sd)
    del bad["encoder.blocks.1.mlp.2.bias"]
    try:
        fc.s3tok_from_state_dict(bad)
        raise AssertionError("missing tensor accepted")
    except fc.FrontendError as exc:
        assert "encoder.blocks.1.mlp.2.bias" in str(exc), exc
        say(f"missing tensor: {exc}")
    bad = dict(cd)
    bad["xvector.block1.tdnnd2.cam_layer.linear2.weight"] = ptread.Tensor(np.zeros((4, 7, 1), np.float32),
                                                                          "float32")
    try:
        fc.campplus_from_state_dict(bad)
        raise AssertionError("wrong shape accepted")
    except fc.FrontendError as exc:
        assert "block1.1.cam2" in str(exc) or "cam_layer" in str(exc), exc
        say(f"wrong shape: {exc}")
    bad = dict(cd)
    bad["xvector.extra.weight"] = cd["xvector.dense.linear.weight"]
    try:
        fc.campplus_from_state_dict(bad)
        raise AssertionError("extra tensor accepted")
    except fc.FrontendError as exc:
        assert "xvector.extra.weight" in str(exc), exc
    # through convert.py into a model file (needs the small golden model)
    if not HAVE_GOLDEN:
        raise Skip("the rest needs the shared golden model (set COSY_SHARED)")
    out = os.path.join(TMP, "small-fe.gguf")
    rc, so, se = run([os.path.join(TOOLS, "convert.py"), SMALL, "-o", out, "--dtype", "f32",
                      "--tokenizer", TOKDIR, "--added-tokens", os.path.join(TOKDIR, "added_tokens.json"),
                      "--speech-tokenizer", os.path.join(FE, "s3tok_small.pt"),
                      "--campplus", os.path.join(FE, "campplus_small.pt")])
    assert rc == 0, se
    gg = Gguf(out)
    assert len(gg.tensors) == 324 + 546, len(gg.tensors)
    assert gg.value("cosyvoice.s3tok.n_state") == 128 and gg.value("cosyvoice.s3tok.n_layer") == 2
    assert gg.value("cosyvoice.campplus.block_layers") == [12, 24, 16]
    assert gg.value("cosyvoice.campplus.block_dilations") == [1, 2, 2]
    assert abs(gg.value("cosyvoice.s3tok.fsq_scale") - 0.999) < 1e-6
    assert all(gg.dtype(k) == "f32" for k in gg.tensors if k.startswith(("s3tok.", "campplus.")))
    assert np.array_equal(gg.raw("campplus.block2.2.bn1.scale"), c["campplus.block2.2.bn1.scale"])
    rc, so, se = run([os.path.join(TOOLS, "convert.py"), SMALL, "-o", out, "--dtype", "f32",
                      "--tokenizer", TOKDIR, "--added-tokens", os.path.join(TOKDIR, "added_tokens.json"),
                      "--campplus", os.path.join(FE, "s3tok_small.pt")])
    assert rc == 1 and "not a CAM++" in se, se
    say(f"the tokenizer given as CAM++: {se.strip()}")


def test_frontend_onnx():
    """front-end ONNX files mapped by graph structure == the state dicts; broken graphs named."""
    try:
        import onnx
    except ImportError:
        raise Skip("the onnx package is not installed (pip install onnx)") from None
    import frontend_convert as fc
    a = fc.s3tok_from_state_dict(ptread.load(os.path.join(FE, "s3tok_small.pt")))
    b = fc.s3tok_from_onnx(os.path.join(FE, "s3tok_small.onnx"))
    assert a[1:] == b[1:] and set(a[0]) == set(b[0])
    e = max(float(np.abs(a[0][k] - b[0][k]).max()) for k in a[0])
    say(f"speech tokenizer: ONNX vs state dict, {len(a[0])} tensors, max abs {e:.1e} (tol 0: same values)")
    assert e == 0
    c = fc.campplus_from_state_dict(ptread.load(os.path.join(FE, "campplus_small.pt")))
    d = fc.campplus_from_onnx(os.path.join(FE, "campplus_small.onnx"))
    assert c[1:] == d[1:] and set(c[0]) == set(d[0])
    e = max(float(np.abs(c[0][k] - d[0][k]).max() / (np.abs(c[0][k]).max() + 1e-30)) for k in c[0])
    say(f"CAM++: ONNX (BN folded by the exporter) vs state dict (folded here), {len(c[0])} tensors, "
        f"max rel {e:.1e} (tol 1e-6)")
    assert e <= 1e-6
    # a graph with a node taken out: the converter names what did not match
    m = onnx.load(os.path.join(FE, "s3tok_small.onnx"))
    inits = {i.name for i in m.graph.initializer}
    idx = [i for i, n in enumerate(m.graph.node) if n.op_type == "MatMul" and n.input[1] in inits][3]
    del m.graph.node[idx]
    p = os.path.join(TMP, "broken_s3.onnx")
    onnx.save(m, p)
    try:
        fc.s3tok_from_onnx(p)
        raise AssertionError("broken graph accepted")
    except fc.FrontendError as exc:
        assert "MatMul" in str(exc), exc
        say(f"speech tokenizer without one MatMul: {exc}")
    m = onnx.load(os.path.join(FE, "campplus_small.onnx"))
    idx = [i for i, n in enumerate(m.graph.node) if n.op_type == "BatchNormalization"][5]
    del m.graph.node[idx]
    p = os.path.join(TMP, "broken_cam.onnx")
    onnx.save(m, p)
    try:
        fc.campplus_from_onnx(p)
        raise AssertionError("broken graph accepted")
    except fc.FrontendError as exc:
        assert "transit1.nonlinear" in str(exc), exc
        say(f"CAM++ without one BatchNormalization: {exc}")
    p = os.path.join(TMP, "not.onnx")
    with open(p, "wb") as fh:
        fh.write(b"not a model")
    try:
        fc.campplus_from_onnx(p)
        raise AssertionError("garbage accepted")
    except fc.FrontendError as exc:
        assert "not a readable ONNX file" in str(exc), exc


def test_make_model_frontend():
    """make_model.py --frontend small: a model file with random front-end models."""
    out = os.path.join(TMP, "demo-fe.gguf")
    rc, so, se = run([os.path.join(TOOLS, "make_model.py"), "--preset", "demo", "--frontend", "preset",
                      "-o", out, "--seed", "3"])
    assert rc == 0, se
    g = Gguf(out)
    fe = [k for k in g.tensors if k.startswith(("s3tok.", "campplus."))]
    assert len(fe) == 546, len(fe)
    assert g.value("cosyvoice.campplus.growth_rate") == 4 and g.value("cosyvoice.s3tok.n_state") == 128
    v = g.raw("s3tok.blocks.0.attn.query.weight")
    sd = float(v.std()) * np.sqrt(128)
    say(f"front end: {len(fe)} tensors; query weight std x sqrt(fan_in) = {sd:.3f} (expect ~1)")
    assert 0.9 < sd < 1.1



# ------------------------------------------------------------------------------------------------
# the released folder (tests/released_folder.py) through the one command

def convert_cmd(args):
    """`cosyvoice-convert ARGS` from this checkout (python -m cosyvoice.convert: the console
    script's code)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-m", "cosyvoice.convert"] + args, cwd=TMP, env=env,
                       capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def test_released_folder():
    """cosyvoice-convert FOLDER -o F on the released layout: same bytes as the explicit options; errors."""
    need_golden()
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import released_folder
    d = released_folder.build(tempfile.mkdtemp(dir=TMP), SHARED)
    # without the front end and grammars: byte for byte the file of convert.py with the tokenizer
    # and the special tokens named from the reference data (the list the package carries is it)
    out = os.path.join(TMP, "released-f32.gguf")
    rc, so, se = convert_cmd([d, "-o", out, "--dtype", "f32", "--no-frontend", "--no-text-grammars"])
    assert rc == 0, se
    with open(out, "rb") as a, open(convert_small("f32"), "rb") as b:
        assert a.read() == b.read(), "the released folder converts differently from the explicit options"
    say("released folder, --no-frontend --no-text-grammars: identical to --tokenizer/--added-tokens")
    # the one command as documented: front end from the .onnx files, grammars when wetext is there
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise Skip("the onnx package is not installed (pip install onnx)") from None
    out = os.path.join(TMP, "released.gguf")
    rc, so, se = convert_cmd([d, "-o", out])
    assert rc == 0, se
    g = Gguf(out)
    fe = [k for k in g.tensors if k.startswith(("s3tok.", "campplus."))]
    assert len(fe) == 546, len(fe)
    assert g.dtype("llm.layers.0.mlp.up_proj.weight") == "bf16"
    grammars = "cosyvoice.text.zh_tn_tagger" in g.kv
    assert grammars == ("wetext is not installed" not in se), se
    say(f"released folder, one command: {len(g.tensors)} tensors ({len(fe)} front end), "
        f"grammars {'packed' if grammars else 'absent (no wetext)'}")
    # --rl takes llm.rl.pt: a copy of llm.pt with one tensor changed
    sds = load_golden_sds()
    l2 = as_plain(sds["llm.pt"])
    k = "llm.model.model.norm.weight"
    l2[k] = (l2[k][0] * 2 + 1, l2[k][1])
    write_pt(os.path.join(d, "llm.rl.pt"), l2)
    out_rl = os.path.join(TMP, "released-rl.gguf")
    args = ["--dtype", "f32", "--no-frontend", "--no-text-grammars"]
    rc, so, se = convert_cmd([d, "-o", out_rl, "--rl"] + args)
    assert rc == 0, se
    assert np.array_equal(Gguf(out_rl).raw("llm.norm.weight"), l2[k][0].astype(np.float32))
    assert np.array_equal(Gguf(convert_small("f32")).raw("llm.norm.weight"),
                          sds["llm.pt"][k].array.astype(np.float32))
    say("--rl: llm.norm.weight from llm.rl.pt")
    os.remove(os.path.join(d, "llm.rl.pt"))
    # folders the converter refuses, each with what is wrong

    def folder(yaml_edit=None, rename=None):
        d2 = released_folder.build(tempfile.mkdtemp(dir=TMP), SHARED)
        y = os.path.join(d2, "cosyvoice3.yaml")
        with open(y, encoding="utf-8") as fh:
            text = fh.read()
        os.remove(y)
        if yaml_edit:
            old, new = yaml_edit
            assert old in text, old
            text = text.replace(old, new)
        with open(os.path.join(d2, rename or "cosyvoice3.yaml"), "w", encoding="utf-8") as fh:
            fh.write(text)
        return d2
    cases = [
        ("a DiT depth the checkpoint does not have", folder(("depth: 2\n", "depth: 22\n")), [],
         ["cosyvoice3.yaml", "flow.decoder.estimator.depth is 22", "writes 2", "--no-yaml-check"]),
        ("another vocoder rate", folder(("upsample_rates: [8, 5, 3]", "upsample_rates: [8, 8, 3]")),
         [], ["hift.upsample_rates is [8, 8, 3]"]),
        ("a streaming chunk of 20 tokens", folder(("chunk_size: 25 #", "chunk_size: 20 #")), [],
         ["flow.decoder.estimator.static_chunk_size is 40", "writes 50"]),
        ("a CosyVoice2 LLM class",
         folder(("cosyvoice.llm.llm.CosyVoice3LM", "cosyvoice.llm.llm.Qwen2LM")), [],
         ["llm is cosyvoice.llm.llm.Qwen2LM, not CosyVoice3LM", "not a Fun-CosyVoice3"]),
        ("a CosyVoice2 folder", folder(rename="cosyvoice2.yaml"), [],
         ["a CosyVoice2 folder (cosyvoice2.yaml)", "Fun-CosyVoice3-0.5B"]),
        ("--rl without llm.rl.pt", d, ["--rl"], ["llm.rl.pt: not found", "without --rl"]),
        ("a file for the folder", os.path.join(d, "llm.pt"), [], ["not a folder"]),
        ("no such folder", os.path.join(TMP, "nowhere"), [], ["nowhere: not found"]),
    ]
    for what, src, extra, words in cases:
        rc, so, se = convert_cmd([src, "-o", os.path.join(TMP, "refused.gguf")] + extra + args)
        msg = se.strip().splitlines()[-1] if se.strip() else ""
        assert rc == 1, f"{what}: exit status {rc}, expected 1 ({se})"
        assert "Traceback" not in se, f"{what}: {se}"
        assert msg.startswith("cosyvoice-convert: error: "), msg
        for w in words:
            assert w in msg, f"{what}: message {msg!r} does not name {w!r}"
        say(f"{what}: exit 1, {msg[len('cosyvoice-convert: error: '):]}")
    # the yaml check can be turned off; a key the yaml leaves out is a note, not an error
    d3 = folder(("depth: 2\n", "depth: 22\n"))
    rc, so, se = convert_cmd([d3, "-o", os.path.join(TMP, "forced.gguf"), "--no-yaml-check"] + args)
    assert rc == 0, se
    d4 = folder(("    nsf_sigma: 0.003\n", ""))
    rc, so, se = convert_cmd([d4, "-o", os.path.join(TMP, "lenient.gguf")] + args)
    assert rc == 0 and "has no hift.nsf_sigma: not compared" in se, se


TESTS = [test_ptread_sha, test_convert_roundtrip, test_bf16_rounding, test_convert_errors, test_make_model,
         test_numpy_hift, test_hift_fp16_emulation, test_frontend_state_dicts, test_frontend_onnx, test_make_model_frontend,
         test_released_folder]


def main():
    return run_tests(TESTS, TMP)


if __name__ == "__main__":
    sys.exit(main())
