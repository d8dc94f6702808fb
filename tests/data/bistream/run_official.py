#!/usr/bin/env python3
"""run_official.py - runs the OFFICIAL Qwen2LM.inference_bistream (CosyVoice3LM variant) source,
unmodified, on stand-in objects and writes the input schedule it produces, in the trace format of
the library (COSY_TEXT_TRACE) that tests/bistream_ref.py reads. The committed official.trace is
its output; tests/test_textstream.c checks that tests/bistream_ref.py (the reference the
library's own schedule is compared with) reproduces it exactly.

Command that made official.trace (the official file at commit
ace7c47f41bbd303aa6bf1ea80e6f9fbd595cd40 of FunAudioLLM/CosyVoice, the commit of the golden
data, extracted with `git show ace7c47:cosyvoice/llm/llm.py > .dev/official/llm.py`):

    python3 tests/data/bistream/run_official.py .dev/official/llm.py > tests/data/bistream/official.trace

Why stand-ins: torch is not installed here (and no model is needed: the schedule does not depend
on the network's numbers). The two methods inference_bistream and sampling_ids are taken from the
official file with `ast` and executed as they are, with a numpy-backed stand-in for the few torch
calls they make; the embeddings are 2-wide rows (id, kind) so every row fed to the LLM says which
text id or speech row it is; forward_one_step records the rows it is given; the sampler returns a
fixed sequence of speech tokens (and, in the final decode, the end token after a fixed count),
so the official loop's decisions (what it feeds when, where it forces the fill token, what it
re-feeds at the end) are what is recorded.
"""
import ast
import logging
import sys
import types
import typing

import numpy as np

S = 6561  # speech tokens; CosyVoice3LM: sos S, eos S+1, task_id S+2, fill S+3
EOP = 151646


class T:
    """The few tensor operations inference_bistream / sampling_ids use, on a numpy array."""

    def __init__(self, a):
        self.a = np.asarray(a)

    device = "cpu"
    dtype = np.float64

    @property
    def shape(self):
        return self.a.shape

    def size(self, d=None):
        return self.a.shape if d is None else self.a.shape[d]

    def __getitem__(self, k):
        r = self.a[k]
        return T(r) if isinstance(r, np.ndarray) else r

    def __setitem__(self, k, v):
        self.a[k] = v

    def __contains__(self, x):
        return bool((self.a == x).any())

    def reshape(self, *s):
        return T(self.a.reshape(*s))

    def flatten(self):
        return T(self.a.flatten())

    def tolist(self):
        return self.a.tolist()

    def to(self, *a, **k):
        return self

    def log_softmax(self, dim=-1):
        return self

    def squeeze(self, dim=None):
        return T(self.a.squeeze(dim))


def _concat(xs, dim=0):
    return T(np.concatenate([x.a for x in xs], axis=dim))


fake_torch = types.SimpleNamespace(
    concat=_concat, cat=_concat,
    zeros=lambda *s, dtype=None: T(np.zeros(s)),
    ones=lambda s, device=None: T(np.ones(s)),
    tril=lambda x: x,
    bool=bool,
    Tensor=T,
    inference_mode=lambda: (lambda f: f),
)


class Events:
    def __init__(self):
        self.lines = []
        self.sampled_since_forward = True

    def add(self, *w):
        self.lines.append(" ".join(str(x) for x in w))


def official_methods(path):
    """inference_bistream and sampling_ids of the official file, compiled with fake_torch."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    want = {"inference_bistream", "sampling_ids"}
    ns = {"torch": fake_torch, "logging": logging, "Generator": typing.Generator, "List": typing.List}
    got = {}
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name in ("Qwen2LM", "TransformerLM"):
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name in want and fn.name not in got:
                    mod = ast.Module(body=[fn], type_ignores=[])
                    exec(compile(mod, path, "exec"), ns)
                    got[fn.name] = ns[fn.name]
    assert set(got) == want, got.keys()
    return got


def make_lm(methods, ev, samples, n_final):
    """A stand-in CosyVoice3LM: attributes as CosyVoice3LM.__init__ sets them."""

    class CosyVoice3LM:
        pass

    lm = CosyVoice3LM()
    lm.speech_token_size = S
    lm.sos, lm.eos_token, lm.task_id, lm.fill_token = S, S + 1, S + 2, S + 3
    lm.mix_ratio = [5, 15]
    V = S + 200
    emb_s = np.stack([np.arange(V), np.ones(V)], axis=1)
    lm.llm_input_size = 2
    lm.speech_embedding = type("Emb", (), {"weight": T(emb_s),
                                           "__call__": lambda self, ids: T(emb_s[ids.a])})()

    def embed_tokens(ids):
        a = ids.a
        return T(np.stack([a, np.zeros_like(a)], axis=-1).astype(np.float64))

    state = {"pos": 0, "final": 0}

    def forward_one_step(xs, masks=None, cache=None):
        if not ev.sampled_since_forward:
            ev.add("X")  # the previous forward's output was the forced fill token
        rows = xs.a[0]
        ev.add("F", *[("s%d" if k else "t%d") % v for v, k in rows.astype(np.int64)])
        ev.sampled_since_forward = False
        state["pos"] += rows.shape[0]
        return T(np.zeros((1, rows.shape[0], 1))), [[T(np.zeros((1, 1, state["pos"])))]]

    lm.llm = types.SimpleNamespace(forward_one_step=forward_one_step,
                                   model=types.SimpleNamespace(
                                       model=types.SimpleNamespace(embed_tokens=embed_tokens)))
    lm.llm_decoder = lambda h: T(np.zeros((1, V)))

    it = iter(samples)

    def sampling(scores, decoded, top_k):
        ev.sampled_since_forward = True
        if scores.a[S] == -np.inf:  # ignore_eos: the interleaved decode
            tok = next(it)
            ev.add("O", tok)
            return tok
        state["final"] += 1
        if state["final"] > n_final:
            ev.add("S")
            return S + 1
        tok = next(it)
        ev.add("O", tok)
        return tok

    lm.sampling = sampling
    lm.sampling_ids = types.MethodType(methods["sampling_ids"], lm)
    lm.inference_bistream = types.MethodType(methods["inference_bistream"], lm)
    return lm


CASES = [
    # (prompt text ids after the system prefix, prompt speech count, text ids count, final tokens)
    ("golden-like", 14, 60, 36, 25),
    ("P multiple of 15", 0, 45, 23, 10),
    ("short text", 3, 87, 4, 7),
    ("no prompt speech", 2, 0, 17, 5),
    ("long text", 9, 87, 120, 40),
]


def main():
    methods = official_methods(sys.argv[1])
    rng = np.random.RandomState(1234)
    prefix = [2610, 525, 264, 10950, 17847, 13, EOP]  # "You are a helpful assistant.<|endofprompt|>"
    for rid, (name, n_pt, P, n_text, n_final) in enumerate(CASES):
        ev = Events()
        cache = [int(x) for x in rng.randint(1000, 100000, size=n_pt)]
        ps = [int(x) for x in rng.randint(0, S, size=P)]
        texts = [int(x) for x in rng.randint(1000, 100000, size=n_text)]
        samples = [int(x) for x in rng.randint(0, S, size=4000)]
        ev.add("H", "S=%d" % S, "P=%d" % P, "prefix", *prefix, "cache", *cache, "ps", *ps)
        lm = make_lm(methods, ev, samples, n_final)

        def gen():
            for t in texts:
                ev.add("T", t)
                yield T(np.array([[t]]))

        prompt_text = T(np.array([prefix + cache]))
        pst = T(np.array([ps], dtype=np.int64).reshape(1, P))
        for _ in lm.inference_bistream(gen(), prompt_text, None, pst, P, None):
            pass
        print("# case %d: %s (official inference_bistream, stand-in LLM)" % (rid, name))
        for line in ev.lines:
            print(rid, line)


if __name__ == "__main__":
    main()
