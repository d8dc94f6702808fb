"""Front-end models for the model file: the speech tokenizer v3 and the CAM++ speaker model.

Each is read either from its official ONNX file (speech_tokenizer_v3.onnx, campplus.onnx; needs
the `onnx` package, at conversion time only) or from a PyTorch state dict of the same
architecture (S3TokenizerV3 / CAMPPlus parameter names; read with ptread, numpy only), and mapped
to one canonical set of tensors (docs/model-format.md section "Front end"):

  speech tokenizer  s3tok.*   (S = width, L = blocks, K = FSMN kernel)
    s3tok.conv1.weight [S][128][3], .bias [S]; s3tok.conv2.weight [S][S][3], .bias [S]
    s3tok.blocks.{i}.attn_ln.weight/.bias [S]; .attn.query.weight [S][S], .bias [S];
      .attn.key.weight [S][S]; .attn.value.weight [S][S], .bias [S]; .attn.out.weight [S][S],
      .bias [S]; .attn.fsmn.weight [S][K]; .mlp_ln.weight/.bias [S]; .mlp.0.weight [4S][S],
      .bias [4S]; .mlp.2.weight [S][4S], .bias [S]
    s3tok.project_down.weight [8][S], .bias [8]
  CAM++             campplus.*  (every BatchNorm that directly follows a convolution is folded
                    into it, as the official ONNX export has it; the others are stored as a
                    per-channel affine y = x * scale + shift)
    campplus.head.conv1.weight [M][1][3][3], .bias [M]      (M = 32 channels)
    campplus.head.layer{1,2}.{0,1}.conv{1,2}.weight [M][M][3][3], .bias [M]
    campplus.head.layer{1,2}.0.shortcut.weight [M][M][1][1], .bias [M]
    campplus.head.conv2.weight [M][M][3][3], .bias [M]
    campplus.tdnn.weight [C0][M*F/8][5], .bias [C0]
    campplus.block{b}.{j}.bn1.scale/.shift [Cin]; .linear1.weight [Bn][Cin], .bias [Bn];
      .local.weight [G][Bn][3]; .cam1.weight [Bn/2][Bn], .bias [Bn/2]; .cam2.weight [G][Bn/2],
      .bias [G]        (b = 1..3, j = 0..n_b-1, Cin = C_b + j G)
    campplus.transit{b}.bn.scale/.shift [C]; .linear.weight [C/2][C], .bias [C/2]
    campplus.dense.weight [E][2 C3], .bias [E]
The hyperparameters (returned as dicts of u32 / f32 keys) are derived from the shapes.
"""
import numpy as np

BN_EPS = 1e-5
S3_MELS = 128
S3_HEAD_DIM = 64


class FrontendError(Exception):
    pass


def _f(a):
    return np.asarray(a, dtype=np.float32)


def _bn_affine(gamma, beta, mean, var, eps=BN_EPS):
    s = (np.asarray(gamma, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps))
    return s, np.asarray(beta, np.float64) - np.asarray(mean, np.float64) * s


def _fold(w, b, scale, shift):
    """conv (w, b) followed by y * scale + shift -> one conv."""
    w64 = np.asarray(w, np.float64) * scale.reshape((-1,) + (1,) * (w.ndim - 1))
    b64 = (np.zeros(w.shape[0]) if b is None else np.asarray(b, np.float64)) * scale + shift
    return _f(w64), _f(b64)


# ------------------------------------------------------------------------------------------------
# speech tokenizer v3

def _s3_hparams(out, src):
    w1 = out["s3tok.conv1.weight"]
    S = w1.shape[0]
    if w1.shape != (S, S3_MELS, 3) or S % S3_HEAD_DIM:
        raise FrontendError(f"{src}: conv1 weight {list(w1.shape)} is not [S][128][3] with S a "
                            f"multiple of 64")
    L = 0
    while f"s3tok.blocks.{L}.attn.query.weight" in out:
        L += 1
    if L == 0:
        raise FrontendError(f"{src}: no attention blocks found")
    K = out["s3tok.blocks.0.attn.fsmn.weight"].shape[1]
    exp = {"s3tok.conv1.weight": (S, S3_MELS, 3), "s3tok.conv1.bias": (S,),
           "s3tok.conv2.weight": (S, S, 3), "s3tok.conv2.bias": (S,),
           "s3tok.project_down.weight": (8, S), "s3tok.project_down.bias": (8,)}
    for i in range(L):
        p = f"s3tok.blocks.{i}."
        for k, shp in {"attn_ln.weight": (S,), "attn_ln.bias": (S,), "attn.query.weight": (S, S),
                       "attn.query.bias": (S,), "attn.key.weight": (S, S), "attn.value.weight": (S, S),
                       "attn.value.bias": (S,), "attn.out.weight": (S, S), "attn.out.bias": (S,),
                       "attn.fsmn.weight": (S, K), "mlp_ln.weight": (S,), "mlp_ln.bias": (S,),
                       "mlp.0.weight": (4 * S, S), "mlp.0.bias": (4 * S,),
                       "mlp.2.weight": (S, 4 * S), "mlp.2.bias": (S,)}.items():
            exp[p + k] = shp
    for n, shp in exp.items():
        if n not in out:
            raise FrontendError(f"{src}: missing {n}")
        if tuple(out[n].shape) != shp:
            raise FrontendError(f"{src}: {n} has shape {list(out[n].shape)}, expected {list(shp)}")
    extra = sorted(set(out) - set(exp))
    if extra:
        raise FrontendError(f"{src}: unexpected tensors {extra[:5]}")
    hp = dict(n_mels=S3_MELS, n_state=S, n_head=S // S3_HEAD_DIM, n_layer=L, fsmn_kernel=K)
    hpf = dict(ln_eps=1e-5, rope_theta=10000.0, fsq_scale=0.9990000128746033)
    return hp, hpf


def s3tok_from_state_dict(sd, src="speech tokenizer state dict"):
    """sd: name -> array (S3TokenizerV3.state_dict() names, optional 'encoder.'/'quantizer.')."""
    sd = {k: _f(getattr(v, "array", v)) for k, v in sd.items()}
    if "encoder.conv1.weight" not in sd:
        raise FrontendError(f"{src}: not a speech tokenizer (S3TokenizerV3) state dict: no "
                            f"encoder.conv1.weight (first keys: {sorted(sd)[:3]})")
    sd.pop("encoder.freqs_cis", None)
    out = {}

    def take(k):
        if k not in sd:
            raise FrontendError(f"{src}: missing tensor {k}")
        return sd.pop(k)
    for c in ("conv1", "conv2"):
        out[f"s3tok.{c}.weight"] = take(f"encoder.{c}.weight")
        out[f"s3tok.{c}.bias"] = take(f"encoder.{c}.bias")
    i = 0
    while f"encoder.blocks.{i}.attn.query.weight" in sd:
        p, q = f"encoder.blocks.{i}.", f"s3tok.blocks.{i}."
        for k in ("attn_ln.weight", "attn_ln.bias", "attn.query.weight", "attn.query.bias",
                  "attn.key.weight", "attn.value.weight", "attn.value.bias", "attn.out.weight",
                  "attn.out.bias", "mlp_ln.weight", "mlp_ln.bias", "mlp.0.weight", "mlp.0.bias",
                  "mlp.2.weight", "mlp.2.bias"):
            out[q + k] = take(p + k)
        f = take(p + "attn.fsmn_block.weight")
        if f.ndim != 3 or f.shape[1] != 1:
            raise FrontendError(f"{src}: {p}attn.fsmn_block.weight {list(f.shape)} is not [S][1][K]")
        out[q + "attn.fsmn.weight"] = f[:, 0, :]
        i += 1
    out["s3tok.project_down.weight"] = take("quantizer._codebook.project_down.weight")
    out["s3tok.project_down.bias"] = take("quantizer._codebook.project_down.bias")
    if sd:
        raise FrontendError(f"{src}: unexpected tensors {sorted(sd)[:5]}")
    return (out,) + _s3_hparams(out, src)


class _Graph:
    """An ONNX graph indexed by structure: which node produces / consumes each value, and the
    float parameters (initializers and Constant outputs)."""

    def __init__(self, path):
        try:
            import onnx
            from onnx import numpy_helper
        except ImportError:
            raise FrontendError(f"{path}: reading ONNX files needs the 'onnx' Python package "
                                f"(pip install onnx; cosyvoice-convert --no-frontend converts "
                                f"without the front-end models)") from None
        try:
            m = onnx.load(path)
        except Exception as exc:  # noqa: BLE001 - onnx raises several kinds
            raise FrontendError(f"{path}: not a readable ONNX file ({exc})") from None
        g = m.graph
        self.path = path
        self.params = {i.name: numpy_helper.to_array(i) for i in g.initializer}
        self.nodes = []
        for n in g.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        self.params[n.output[0]] = numpy_helper.to_array(a.t)
                continue
            self.nodes.append(n)
        self.producer = {o: n for n in self.nodes for o in n.output}
        self.consumers = {}
        for n in self.nodes:
            for x in n.input:
                self.consumers.setdefault(x, []).append(n)
        self.attr = lambda n, k, d=None: next(
            (onnx.helper.get_attribute_value(a) for a in n.attribute if a.name == k), d)

    def param(self, node, idx):
        """The float parameter feeding input idx of node, or None."""
        if idx >= len(node.input) or node.input[idx] not in self.params:
            return None
        a = self.params[node.input[idx]]
        return _f(a) if a.dtype.kind == "f" else None

    def fparams(self, node):
        return [(i, self.param(node, i)) for i in range(len(node.input)) if self.param(node, i) is not None]

    def bias_add(self, node):
        """The 1-D parameter of the Add node that consumes node's output (a Linear's bias)."""
        for c in self.consumers.get(node.output[0], []):
            if c.op_type == "Add":
                ps = [p for _, p in self.fparams(c) if p.ndim == 1 and p.size > 1]
                if len(ps) == 1:
                    return c, ps[0]
        return None, None


def s3tok_from_onnx(path):
    """Map speech_tokenizer_v3.onnx by graph structure: the Conv nodes in graph order (conv1,
    conv2, then one depthwise FSMN conv per block), the MatMul/Gemm nodes with a 2-D weight
    (six per block - query, key, value, out, mlp.0, mlp.2 - then project_down) with the bias of
    the Add that consumes each, and the LayerNorm affines (LayerNormalization nodes, or the Mul
    and Add by a [S] parameter of a decomposed one that are not a Linear's bias), two per block."""
    g = _Graph(path)
    convs, mats, ln = [], [], []
    bias_nodes = set()
    for n in g.nodes:
        if n.op_type == "Conv":
            w = g.param(n, 1)
            if w is None:
                raise FrontendError(f"{path}: Conv node {n.name!r} has no weight initializer")
            convs.append((n, w, g.param(n, 2)))
        elif n.op_type in ("MatMul", "Gemm"):
            w = g.param(n, 1)
            if w is None or w.ndim != 2:
                continue
            if n.op_type == "Gemm":
                wt = w if g.attr(n, "transB", 0) else w.T
                b = g.param(n, 2)
            else:
                wt = w.T                       # MatMul(x, W) with W [in][out]
                bn, b = g.bias_add(n)
                if bn is not None:
                    bias_nodes.add(bn.name)
            mats.append((n, wt, b))
        elif n.op_type == "LayerNormalization":
            ln.append(("w", g.param(n, 1)))
            ln.append(("b", g.param(n, 2)))
    for n in g.nodes:
        if n.op_type in ("Mul", "Add") and n.name not in bias_nodes:
            ps = [p for _, p in g.fparams(n) if p.ndim == 1 and p.size >= S3_HEAD_DIM]
            if len(ps) == 1:
                ln.append(("w" if n.op_type == "Mul" else "b", ps[0]))
    ln_nodes = [x for x in ln]
    if len(convs) < 3 or (len(convs) - 2) * 6 + 1 != len(mats):
        raise FrontendError(f"{path}: graph structure does not match the speech tokenizer v3: "
                            f"{len(convs)} Conv nodes and {len(mats)} MatMul/Gemm nodes with weights "
                            f"(expected 2 + L and 6 L + 1 for L blocks)")
    L = len(convs) - 2
    if len(ln_nodes) != 4 * L:
        raise FrontendError(f"{path}: found {len(ln_nodes)} LayerNorm scale/shift parameters, "
                            f"expected {4 * L} for {L} blocks")
    out = {}
    for i, c in enumerate(("conv1", "conv2")):
        n, w, b = convs[i]
        if b is None:
            raise FrontendError(f"{path}: {c} (node {n.name!r}) has no bias")
        out[f"s3tok.{c}.weight"], out[f"s3tok.{c}.bias"] = w, b
    names = ("query", "key", "value", "out", "mlp.0", "mlp.2")
    for i in range(L):
        q = f"s3tok.blocks.{i}."
        n, w, _ = convs[2 + i]
        if w.ndim != 3 or w.shape[1] != 1:
            raise FrontendError(f"{path}: block {i} FSMN conv (node {n.name!r}) weight "
                                f"{list(w.shape)} is not depthwise [S][1][K]")
        out[q + "attn.fsmn.weight"] = w[:, 0, :]
        for j, nm in enumerate(names):
            n, w, b = mats[6 * i + j]
            key = q + (f"attn.{nm}" if j < 4 else nm)
            out[key + ".weight"] = w
            if nm == "key":
                if b is not None:
                    raise FrontendError(f"{path}: block {i} key projection (node {n.name!r}) has a "
                                        f"bias; the v3 key has none")
            elif b is None:
                raise FrontendError(f"{path}: block {i} {nm} projection (node {n.name!r}) has no "
                                    f"bias Add")
            else:
                out[key + ".bias"] = b
        kinds = [k for k, _ in ln_nodes[4 * i:4 * i + 4]]
        if kinds != ["w", "b", "w", "b"]:
            raise FrontendError(f"{path}: block {i} LayerNorm parameters come as {kinds}, "
                                f"expected scale, shift, scale, shift")
        out[q + "attn_ln.weight"], out[q + "attn_ln.bias"] = ln_nodes[4 * i][1], ln_nodes[4 * i + 1][1]
        out[q + "mlp_ln.weight"], out[q + "mlp_ln.bias"] = ln_nodes[4 * i + 2][1], ln_nodes[4 * i + 3][1]
    n, w, b = mats[-1]
    if b is None:
        raise FrontendError(f"{path}: project_down (node {n.name!r}) has no bias")
    out["s3tok.project_down.weight"], out["s3tok.project_down.bias"] = w, b
    return (out,) + _s3_hparams(out, path)


# ------------------------------------------------------------------------------------------------
# CAM++

HEAD_CONVS = ["head.conv1", "head.layer1.0.conv1", "head.layer1.0.conv2", "head.layer1.0.shortcut",
              "head.layer1.1.conv1", "head.layer1.1.conv2", "head.layer2.0.conv1",
              "head.layer2.0.conv2", "head.layer2.0.shortcut", "head.layer2.1.conv1",
              "head.layer2.1.conv2", "head.conv2"]


def _cam_from_events(ev, src):
    """ev: the network in forward order after folding: ('conv', w, b) and ('bn', scale, shift).
    -> canonical tensors and hyperparameters."""
    out = {}
    pos = [0]

    def nxt(kind, what):
        if pos[0] >= len(ev):
            raise FrontendError(f"{src}: graph ends where {what} was expected")
        e = ev[pos[0]]
        if e[0] != kind:
            raise FrontendError(f"{src}: parameter group {pos[0]} is a {e[0]} where {what} "
                                f"(a {kind}) was expected")
        pos[0] += 1
        return e[1], e[2]

    def conv(name, what, need_bias=True):
        w, b = nxt("conv", what)
        if b is None and need_bias:
            b = np.zeros(w.shape[0], np.float32)
        out[f"campplus.{name}.weight"] = w
        if need_bias:
            out[f"campplus.{name}.bias"] = b
        return w
    for h in HEAD_CONVS:
        conv(h, h)
    M = out["campplus.head.conv1.weight"].shape[0]
    w = conv("tdnn", "xvector.tdnn")
    C0, HF = w.shape[0], w.shape[1]
    F = HF // M * 8
    blocks, b, C = [], 1, C0
    G = Bn = None
    while True:
        # a dense block: units (bn, conv 1x1, conv k, conv 1x1, conv 1x1); a transit: (bn, conv)
        n = 0
        while pos[0] + 2 < len(ev) and ev[pos[0]][0] == "bn" and ev[pos[0] + 2][0] == "conv" and \
                ev[pos[0] + 1][0] == "conv" and ev[pos[0] + 2][1].shape[-1] > 1:
            p = f"block{b}.{n}"
            s, t = nxt("bn", p + ".nonlinear1")
            out[f"campplus.{p}.bn1.scale"], out[f"campplus.{p}.bn1.shift"] = s, t
            w1, b1 = nxt("conv", p + ".linear1")
            out[f"campplus.{p}.linear1.weight"] = w1[..., 0] if w1.ndim == 3 else w1
            out[f"campplus.{p}.linear1.bias"] = b1 if b1 is not None else np.zeros(w1.shape[0], np.float32)
            wl, bl = nxt("conv", p + ".cam_layer.linear_local")
            if bl is not None:
                raise FrontendError(f"{src}: {p}.cam_layer.linear_local has a bias (expected none)")
            out[f"campplus.{p}.local.weight"] = wl
            for k, nm in (("cam1", "linear1"), ("cam2", "linear2")):
                wc, bc = nxt("conv", f"{p}.cam_layer.{nm}")
                out[f"campplus.{p}.{k}.weight"] = wc[..., 0] if wc.ndim == 3 else wc
                out[f"campplus.{p}.{k}.bias"] = bc if bc is not None else np.zeros(wc.shape[0], np.float32)
            n += 1
        if n == 0:
            raise FrontendError(f"{src}: no dense layers found for block {b} at parameter group {pos[0]}")
        if G is None:
            G, Bn = out[f"campplus.block{b}.0.local.weight"].shape[:2]
        blocks.append((n, out[f"campplus.block{b}.0.local.weight"].shape[2]))
        s, t = nxt("bn", f"transit{b}.nonlinear")
        out[f"campplus.transit{b}.bn.scale"], out[f"campplus.transit{b}.bn.shift"] = s, t
        w = conv(f"transit{b}.linear", f"transit{b}.linear")
        if w.ndim == 3:
            out[f"campplus.transit{b}.linear.weight"] = w[..., 0]
        if pos[0] < len(ev) and ev[pos[0]][0] == "bn":
            b += 1
            continue
        break
    w = conv("dense", "xvector.dense")
    if w.ndim == 3:
        out["campplus.dense.weight"] = w[..., 0]
    if pos[0] != len(ev):
        raise FrontendError(f"{src}: {len(ev) - pos[0]} parameter groups left after xvector.dense")
    hp = dict(feat_dim=F, m_channels=M, init_channels=C0, growth_rate=G, bn_channels=Bn,
              embedding_size=out["campplus.dense.weight"].shape[0], n_blocks=len(blocks), seg_len=100)
    hpa = dict(block_layers=[x[0] for x in blocks], block_kernels=[x[1] for x in blocks])
    _cam_check(out, hp, hpa, src)
    return out, hp, hpa


def cam_expected(hp, hpa, dil_unused=None):
    M, F, C0, G, Bn, E = (hp[k] for k in ("m_channels", "feat_dim", "init_channels", "growth_rate",
                                            "bn_channels", "embedding_size"))
    e = {}
    for h in HEAD_CONVS:
        cin = 1 if h == "head.conv1" else M
        k = 1 if h.endswith("shortcut") else 3
        e[f"campplus.{h}.weight"] = (M, cin, k, k)
        e[f"campplus.{h}.bias"] = (M,)
    e["campplus.tdnn.weight"] = (C0, M * (F // 8), 5)
    e["campplus.tdnn.bias"] = (C0,)
    C = C0
    for b, (n, k) in enumerate(zip(hpa["block_layers"], hpa["block_kernels"]), 1):
        for j in range(n):
            p = f"campplus.block{b}.{j}."
            cin = C + j * G
            e.update({p + "bn1.scale": (cin,), p + "bn1.shift": (cin,), p + "linear1.weight": (Bn, cin),
                      p + "linear1.bias": (Bn,), p + "local.weight": (G, Bn, k),
                      p + "cam1.weight": (Bn // 2, Bn), p + "cam1.bias": (Bn // 2,),
                      p + "cam2.weight": (G, Bn // 2), p + "cam2.bias": (G,)})
        C += n * G
        e[f"campplus.transit{b}.bn.scale"] = (C,)
        e[f"campplus.transit{b}.bn.shift"] = (C,)
        e[f"campplus.transit{b}.linear.weight"] = (C // 2, C)
        e[f"campplus.transit{b}.linear.bias"] = (C // 2,)
        C //= 2
    e["campplus.dense.weight"] = (E, 2 * C)
    e["campplus.dense.bias"] = (E,)
    return e


def _cam_check(out, hp, hpa, src):
    if hp["feat_dim"] % 8 or hp["n_blocks"] != 3:
        raise FrontendError(f"{src}: {hp['n_blocks']} dense blocks / feature width {hp['feat_dim']} "
                            f"(expected 3 blocks, a multiple of 8)")
    e = cam_expected(hp, hpa)
    for n, shp in e.items():
        if n not in out:
            raise FrontendError(f"{src}: missing {n}")
        if tuple(out[n].shape) != shp:
            raise FrontendError(f"{src}: {n} has shape {list(out[n].shape)}, expected {list(shp)}")
    extra = sorted(set(out) - set(e))
    if extra:
        raise FrontendError(f"{src}: unexpected tensors {extra[:5]}")


def campplus_from_state_dict(sd, src="CAM++ state dict"):
    """sd: CAMPPlus.state_dict() names (3D-Speaker)."""
    sd = {k: getattr(v, "array", v) for k, v in sd.items()}
    if "head.conv1.weight" not in sd:
        raise FrontendError(f"{src}: not a CAM++ (CAMPPlus) state dict: no head.conv1.weight "
                            f"(first keys: {sorted(sd)[:3]})")
    used = set()

    def get(k):
        if k not in sd:
            raise FrontendError(f"{src}: missing tensor {k}")
        used.add(k)
        return np.asarray(sd[k])

    def bn(p, affine=True):
        for s in ("num_batches_tracked",):
            if p + "." + s in sd:
                used.add(p + "." + s)
        g = get(p + ".weight") if affine else 1.0
        b = get(p + ".bias") if affine else 0.0
        return _bn_affine(g, b, get(p + ".running_mean"), get(p + ".running_var"))

    def convbn(cp, bp, affine=True):
        s, t = bn(bp, affine)
        b = sd.get(cp + ".bias")
        if b is not None:
            used.add(cp + ".bias")
        return ("conv",) + _fold(get(cp + ".weight"), b, s, t)
    ev = [convbn("head.conv1", "head.bn1")]
    for L in (1, 2):
        for j in (0, 1):
            p = f"head.layer{L}.{j}"
            ev.append(convbn(p + ".conv1", p + ".bn1"))
            ev.append(convbn(p + ".conv2", p + ".bn2"))
            if p + ".shortcut.0.weight" in sd:
                ev.append(convbn(p + ".shortcut.0", p + ".shortcut.1"))
    ev.append(convbn("head.conv2", "head.bn2"))
    ev.append(convbn("xvector.tdnn.linear", "xvector.tdnn.nonlinear.batchnorm"))
    b = 1
    while f"xvector.block{b}.tdnnd1.linear1.weight" in sd:
        j = 1
        while f"xvector.block{b}.tdnnd{j}.linear1.weight" in sd:
            p = f"xvector.block{b}.tdnnd{j}"
            ev.append(("bn",) + tuple(_f(x) for x in bn(p + ".nonlinear1.batchnorm")))
            ev.append(convbn(p + ".linear1", p + ".nonlinear2.batchnorm"))
            ev.append(("conv", _f(get(p + ".cam_layer.linear_local.weight")), None))
            for nm in ("linear1", "linear2"):
                ev.append(("conv", _f(get(f"{p}.cam_layer.{nm}.weight")), _f(get(f"{p}.cam_layer.{nm}.bias"))))
            j += 1
        ev.append(("bn",) + tuple(_f(x) for x in bn(f"xvector.transit{b}.nonlinear.batchnorm")))
        last = f"xvector.block{b + 1}.tdnnd1.linear1.weight" not in sd
        if last:
            ev.append(convbn(f"xvector.transit{b}.linear", "xvector.out_nonlinear.batchnorm"))
        else:
            tb = sd.get(f"xvector.transit{b}.linear.bias")
            if tb is not None:
                used.add(f"xvector.transit{b}.linear.bias")
            ev.append(("conv", _f(get(f"xvector.transit{b}.linear.weight")), None if tb is None else _f(tb)))
        b += 1
    ev.append(convbn("xvector.dense.linear", "xvector.dense.nonlinear.batchnorm", affine=False))
    left = sorted(set(sd) - used)
    if left:
        raise FrontendError(f"{src}: unexpected tensors {left[:5]}")
    return _cam_from_events(ev, src)


def campplus_from_onnx(path):
    """Map campplus.onnx by graph structure: the Conv and BatchNormalization nodes in graph order,
    each with the parameters feeding its inputs; a BatchNormalization whose input comes straight
    from a Conv (through Reshape/Squeeze/Unsqueeze only) is folded into it. The resulting sequence
    must read as the CAM++ network (head convs, tdnn, dense layers, transits, dense)."""
    g = _Graph(path)
    ev, conv_at = [], {}
    for n in g.nodes:
        if n.op_type == "Conv":
            w = g.param(n, 1)
            if w is None:
                raise FrontendError(f"{path}: Conv node {n.name!r} has no weight initializer")
            if (g.attr(n, "group", 1) or 1) != 1:
                raise FrontendError(f"{path}: Conv node {n.name!r} is grouped; CAM++ has none")
            conv_at[n.output[0]] = len(ev)
            ev.append(["conv", w, g.param(n, 2)])
        elif n.op_type == "BatchNormalization":
            p = [g.param(n, i) for i in range(1, 5)]
            if p[2] is None or p[3] is None:
                raise FrontendError(f"{path}: BatchNormalization node {n.name!r} has no running "
                                    f"statistics")
            C = p[2].shape[0]
            gam = p[0] if p[0] is not None else np.ones(C)
            bet = p[1] if p[1] is not None else np.zeros(C)
            s, t = _bn_affine(gam, bet, p[2], p[3], g.attr(n, "epsilon", BN_EPS))
            x = n.input[0]
            while x in g.producer and g.producer[x].op_type in ("Reshape", "Squeeze", "Unsqueeze"):
                x = g.producer[x].input[0]
            if x in conv_at and len(g.consumers.get(x, [])) == 1:
                e = ev[conv_at[x]]
                e[1], e[2] = _fold(e[1], e[2], s, t)
            else:
                ev.append(["bn", _f(s), _f(t)])
    return _cam_from_events([tuple(e) for e in ev], path)
