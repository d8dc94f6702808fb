"""The released folder's cosyvoice3.yaml: read the values the converter checks, without PyYAML.

The file is HyperPyYAML: plain YAML mappings plus tags that build objects (`!new:module.Class`
before a nested mapping, `!name:...`, `!apply:...`) and references (`!ref <key>`, also in
arithmetic such as `!ref <chunk_size> * <token_mel_ratio>`). read_yaml() reads the subset those
files use - indented `key: value` mappings, scalars (numbers, booleans, null, quoted or bare
strings), flow lists (`[8, 5, 3]`, nested, over several lines) and comments - into nested dicts,
keeping each object's class as the "!class" entry of its mapping and resolving `!ref` to
top-level keys; anything else is kept as its source text, never executed.

check_config() compares the yaml with what the converter writes (the geometry read off the
checkpoints and the constants of docs/model-format.md section 2): a folder of another model (a
CosyVoice2 yaml, other rates or constants) is refused with the key that differs.
"""
import ast
import json
import operator
import re

_KEY = re.compile(r"^([A-Za-z_][\w.-]*)\s*:(?:\s+(.*))?$")
_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv}


class ConfigError(Exception):
    """The yaml cannot be read, or says something the converter does not write."""


def _strip_comment(line):
    """line without a trailing `# comment` (a # outside quotes, at the start or after a space)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text):
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "~", ""):
        return None
    if _NUMBER.match(t):
        return int(t) if re.match(r"^[-+]?\d+$", t) else float(t)
    if t.startswith("["):
        try:
            return json.loads(t)
        except ValueError:
            return t      # a list of references or objects: kept as text
    return t


def _arith(expr):
    """Value of an expression of numbers and + - * / //, or None."""
    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float)):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            return _OPS[type(n.op)](ev(n.left), ev(n.right))
        raise ValueError(expr)
    try:
        return ev(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def read_yaml(text, src="cosyvoice3.yaml"):
    """Nested dicts of the mappings in text (see the module's docstring)."""
    root = {}
    stack = [(-1, root)]
    refs = []          # (mapping, key, expression): resolved once the whole file is read
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = _strip_comment(lines[i].replace("\t", "    "))
        i += 1
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if body.startswith("- ") or body == "-":
            continue       # block sequences: nothing the converter reads
        m = _KEY.match(body)
        if not m:
            continue       # a continuation the subset does not model (kept out, never guessed)
        key, val = m.group(1), (m.group(2) or "").strip()
        while val.count("[") > val.count("]") and i < len(lines):
            val += " " + _strip_comment(lines[i]).strip()      # a flow list over several lines
            i += 1
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        tag = None
        if val.startswith("!"):
            tag, _, val = val.partition(" ")
            val = val.strip()
        if not val:
            node = {"!class": tag.split(":", 1)[1]} if tag and ":" in tag else {}
            parent[key] = node
            stack.append((indent, node))
        elif tag == "!ref":
            parent[key] = val
            refs.append((parent, key, val))
        else:
            parent[key] = _scalar(val) if tag is None else val
    for parent, key, expr in refs:
        names = re.findall(r"<([\w.-]+)>", expr)
        vals = {n: root.get(n) for n in names}
        if len(names) == 1 and expr.strip() == f"<{names[0]}>":
            parent[key] = vals[names[0]]
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals.values()):
            parent[key] = _arith(re.sub(r"<([\w.-]+)>", lambda mm: repr(vals[mm.group(1)]), expr))
        else:
            parent[key] = expr
    return root


def load(path):
    """read_yaml of a file; ConfigError when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            return read_yaml(fh.read(), path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None


def get(cfg, dotted):
    """cfg's value at 'a.b.c', or KeyError."""
    node = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))
    return a == b


# the networks' classes in a CosyVoice3 yaml (CosyVoice2's are Qwen2LM, CausalMaskedDiffWithXvec
# and HiFTGenerator)
TOKEN_FRAME_RATE = 25   # speech tokens a second: the rate the library assumes (docs/model.md)
CLASSES = {"llm": "CosyVoice3LM", "flow": "CausalMaskedDiffWithDiT", "hift": "CausalHiFTGenerator"}


def expected_values(hp_llm, hp_flow, hp_hift, hp_hift_arrays, llm_f, flow_f, hift_f):
    """(yaml key, value the converter writes) for every key check_config compares."""
    est = "flow.decoder.estimator."
    dil = [list(hp_hift_arrays["resblock_dilations"])] * len(hp_hift_arrays["resblock_kernel_sizes"])
    sdil = [list(hp_hift_arrays["resblock_dilations"])] * \
        len(hp_hift_arrays["source_resblock_kernel_sizes"])
    return [
        ("sample_rate", hp_hift["sample_rate"]),
        ("llm_input_size", hp_llm["hidden_size"]),
        ("llm_output_size", hp_llm["hidden_size"]),
        ("spk_embed_dim", hp_flow["spk_embed_dim"]),
        ("token_frame_rate", TOKEN_FRAME_RATE),
        ("token_mel_ratio", hp_flow["token_mel_ratio"]),
        ("llm.speech_token_size", hp_llm["speech_token_size"]),
        ("flow.input_size", hp_flow["mel_dim"]),
        ("flow.output_size", hp_flow["mel_dim"]),
        ("flow.vocab_size", hp_flow["vocab_size"]),
        ("flow.pre_lookahead_len", hp_flow["pre_lookahead_len"]),
        ("flow.pre_lookahead_layer.channels", hp_flow["pre_channels"]),
        ("flow.decoder.cfm_params.content.inference_cfg_rate", flow_f["cfg_rate"]),
        (est + "dim", hp_flow["dit_dim"]),
        (est + "depth", hp_flow["dit_depth"]),
        (est + "heads", hp_flow["dit_heads"]),
        (est + "dim_head", hp_flow["dit_head_dim"]),
        (est + "ff_mult", hp_flow["dit_ff_dim"] / hp_flow["dit_dim"]),
        (est + "mel_dim", hp_flow["mel_dim"]),
        (est + "static_chunk_size", hp_flow["static_chunk_size"]),
        ("hift.base_channels", hp_hift["base_channels"]),
        ("hift.nb_harmonics", hp_hift["nb_harmonics"]),
        ("hift.sampling_rate", hp_hift["sample_rate"]),
        ("hift.nsf_alpha", hift_f["nsf_alpha"]),
        ("hift.nsf_sigma", hift_f["nsf_sigma"]),
        ("hift.nsf_voiced_threshold", hift_f["voiced_threshold"]),
        ("hift.upsample_rates", hp_hift_arrays["upsample_rates"]),
        ("hift.upsample_kernel_sizes", hp_hift_arrays["upsample_kernel_sizes"]),
        ("hift.istft_params.n_fft", hp_hift["istft_n_fft"]),
        ("hift.istft_params.hop_len", hp_hift["istft_hop"]),
        ("hift.resblock_kernel_sizes", hp_hift_arrays["resblock_kernel_sizes"]),
        ("hift.resblock_dilation_sizes", dil),
        ("hift.source_resblock_kernel_sizes", hp_hift_arrays["source_resblock_kernel_sizes"]),
        ("hift.source_resblock_dilation_sizes", sdil),
        ("hift.lrelu_slope", hift_f["lrelu_slope"]),
        ("hift.audio_limit", hift_f["audio_limit"]),
        ("hift.conv_pre_look_right", hp_hift["conv_pre_look_right"]),
        ("hift.f0_predictor.cond_channels", hp_hift["cond_channels"]),
    ]


def check_config(cfg, expected, src="cosyvoice3.yaml"):
    """Raise ConfigError at the first key of expected ((key, value) pairs) whose yaml value
    differs, or when a network's class is not CosyVoice3's. -> (keys compared, keys missing)."""
    for net, cls in CLASSES.items():
        got = cfg.get(net, {}).get("!class", "") if isinstance(cfg.get(net), dict) else ""
        if got.rsplit(".", 1)[-1] != cls:
            raise ConfigError(f"{src}: {net} is {got or 'missing'}, not {cls}: this is not a "
                              f"Fun-CosyVoice3 model folder")
    compared, missing = 0, []
    for key, want in expected:
        try:
            got = get(cfg, key)
        except KeyError:
            missing.append(key)       # another revision of the yaml may leave a key out
            continue
        if not _same(got, want):
            raise ConfigError(f"{src}: {key} is {got}, the converter writes {want} (read off the "
                              f"checkpoints or fixed by docs/model-format.md section 2)")
        compared += 1
    return compared, missing
