#!/usr/bin/env python3
"""bistream_ref.py - an independent reimplementation of the input schedule of the official
text-streaming inference (CosyVoice's Qwen2LM.inference_bistream, CosyVoice3LM variant, fed one
text token at a time as the official front end's _extract_text_token_generator does), used to
check the library's schedule.

This is NOT the official code (tests/data/bistream/official.trace, the official code's own
schedule, checks it) and runs no model: it replays the official loop's decisions about
WHAT goes into the LLM and WHEN (which positions get text, prompt speech, generated speech, the
re-fed token, task_id; where the fill token is forced), taking the sampled tokens and the text ids
from the library's trace (COSY_TEXT_TRACE, written by lib/sched_jobs.c and lib/sched_llm.c). The
sampled values themselves cannot be compared with the official code (another random generator);
the schedule can, and is here.

Trace lines (per request id): H S=<speech vocab> P=<n> prefix <ids> cache <ids> ps <ids> (header:
prompt text ids up to <|endofprompt|>, the prompt text after it, the prompt speech tokens),
T <id> (a text id taken), F <items> (one forward's inputs, t<id> text / s<id> speech row),
O <tok> (a sampled token), X (the forced fill token), S (a stop token), E (end of text).

Usage: bistream_ref.py TRACE   -> exit 0 when every request's F/O/X/S sequence matches.
"""
import sys

MIX_TEXT, MIX_SPEECH = 5, 15


def expected(head, texts, samples):
    """The official loop; returns the list of events it produces. samples: the library's sampled
    results (('O', tok) or ('S',)) in order, consumed where the official loop samples."""
    S, P = head["S"], len(head["ps"])
    sos, task, fill = S, S + 2, S + 3
    ev = []
    it = iter(samples)
    lm_input = [("s", sos)] + [("t", i) for i in head["prefix"]]
    text_cache = [("t", i) for i in head["cache"]]
    ps = [("s", i) for i in head["ps"]]
    out = []
    next_fill = (P // MIX_SPEECH + 1) * MIX_SPEECH - P

    def forward(inp):
        ev.append(("F",) + tuple("%s%d" % x for x in inp))

    for tok in texts:
        text_cache = text_cache + [("t", tok)]
        while ps:
            if len(text_cache) >= MIX_TEXT:
                lm_input = lm_input + text_cache[:MIX_TEXT] + ps[:MIX_SPEECH]
                text_cache, ps = text_cache[MIX_TEXT:], ps[MIX_SPEECH:]
            else:
                break
        if not ps:
            if (out and out[-1] == fill) or (not out and len(lm_input) == 1):
                if len(text_cache) >= MIX_TEXT:
                    if out and out[-1] == fill:
                        lm_input = text_cache[:MIX_TEXT]
                    else:
                        lm_input = lm_input + text_cache[:MIX_TEXT]
                    text_cache = text_cache[MIX_TEXT:]
                else:
                    continue
            while True:
                forward(lm_input)
                if len(out) == next_fill:
                    top = fill
                    next_fill += MIX_SPEECH + 1
                    ev.append(("X",))
                else:
                    smp = next(it, None)
                    if smp is None or smp[0] != "O":
                        raise AssertionError("the library stopped while the official loop samples")
                    top = smp[1]
                    ev.append(("O", top))
                if top == fill:
                    next_fill = len(out) + MIX_SPEECH + 1
                out.append(top)
                if top >= S:
                    break
                lm_input = [("s", top)]
    # final decode: upstream concatenates its last lm_input (already fed when a decode ran)
    lm_input = lm_input + text_cache + [("s", task)]
    while True:
        forward(lm_input)
        smp = next(it, None)
        if smp is None:
            ev.pop()  # the library stopped at max_tokens: this forward never ran
            return ev, "max"

        if smp[0] == "S":
            ev.append(("S",))
            return ev, "eos"
        ev.append(("O", smp[1]))
        out.append(smp[1])
        lm_input = [("s", smp[1])]


def parse(path):
    reqs = {}
    for line in open(path):
        w = line.split()
        if not w or w[0].startswith("#"):
            continue
        r = reqs.setdefault(int(w[0]), {"head": None, "texts": [], "events": []})
        k = w[1]
        if k == "H":
            h, key = {"prefix": [], "cache": [], "ps": []}, None
            for x in w[2:]:
                if "=" in x:
                    a, b = x.split("=")
                    h[a] = int(b)
                elif x in ("prefix", "cache", "ps"):
                    key = x
                else:
                    h[key].append(int(x))
            r["head"] = h
        elif k == "T":
            r["texts"].append(int(w[2]))
        elif k == "F":
            r["events"].append(tuple(["F"] + w[2:]))
        elif k == "O":
            r["events"].append(("O", int(w[2])))
        elif k in ("X", "S"):
            r["events"].append((k,))
    return reqs


def main():
    reqs = parse(sys.argv[1])
    bad = 0
    for rid, r in sorted(reqs.items()):
        if r["head"] is None:
            continue
        samples = [e for e in r["events"] if e[0] in ("O", "S")]
        try:
            exp, how = expected(r["head"], r["texts"], samples)
        except AssertionError as ex:
            print("request %d: %s" % (rid, ex))
            bad += 1
            continue
        got = r["events"]
        if got != exp:
            n = next((i for i in range(min(len(got), len(exp))) if got[i] != exp[i]), min(len(got), len(exp)))
            print("request %d: schedule differs at event %d: library %s, reference %s"
                  % (rid, n, got[n] if n < len(got) else None, exp[n] if n < len(exp) else None))
            bad += 1
        else:
            nf = sum(1 for e in got if e[0] == "X")
            print("request %d: %d events match (%d text ids, %d fill tokens, ended by %s)"
                  % (rid, len(got), len(r["texts"]), nf, how))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
