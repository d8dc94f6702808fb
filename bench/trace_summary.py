#!/usr/bin/env python3
"""Summarize a COSY_SCHED_TRACE file (lines: start_s call rows size firsts ms).

Per call kind: count, mean rows, mean / p95 call time, busy share of the traced span; for the
LLM steps also the mean interval between consecutive step starts (how often each decoding
sequence gets a token) and the split of that interval into step, prefill and other time; for the
flow: the span's time with no flow call running (its idle time, in gaps of 4 ms or more, the
largest with its start), and its calls by kind: calls with first chunks, calls of later chunks
only, and of those the small ones (at most 8 jobs; a chain of them, one per decode step, showed
the LLM's yield to playback holding back the next group's step: bench/RESULTS.md, W1).
With --timeline N (a trace of one request at a time, W1 at C = 1: each prefill starts a request),
the last N requests' timelines: the prefill, the decode steps (count, time, first start, last end),
each flow, vocoder and pause call (start, size, duration, end, from the request's prefill), the
request's end, and what came after its last step (the tail).
Usage: trace_summary.py [--timeline N] TRACE [TRACE ...]"""
import sys


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else 0.0


def timeline(rows, n):
    """the last n requests of a one-request-at-a-time trace, each from its prefill on"""
    reqs = []
    for r in sorted(rows):
        if r[1] == "prefill":
            reqs.append([])
        if reqs:
            reqs[-1].append(r)
    for q in reqs[-n:] if n > 0 else []:
        t0 = q[0][0]
        steps = [r for r in q if r[1] == "step"]
        end = max(r[0] + r[5] / 1e3 for r in q)
        line = f"  request: prefill {q[0][5]:.2f} ms ({q[0][3]} positions)"
        if steps:
            last = steps[-1][0] + steps[-1][5] / 1e3
            line += (f", {len(steps)} steps {sum(r[5] for r in steps):.1f} ms from "
                     f"{1e3 * (steps[0][0] - t0):.1f} to {1e3 * (last - t0):.1f} ms")
        print(line)
        for r in q:
            if r[1] in ("flow", "vocoder", "pause"):
                at = 1e3 * (r[0] - t0)
                print(f"    {r[1]:8s} at {at:7.1f} ms  size {r[3]:5d}  first {r[4]}  "
                      f"{r[5]:6.2f} ms  ends {at + r[5]:7.1f}")
        tail = f", tail after the last step {1e3 * (end - last):.1f} ms" if steps else ""
        print(f"    end {1e3 * (end - t0):.1f} ms{tail}")


args = sys.argv[1:]
n_timeline = 0
if args[:1] == ["--timeline"]:
    if len(args) < 2 or not args[1].isdigit():
        sys.exit("usage: trace_summary.py [--timeline N] TRACE [TRACE ...]")
    n_timeline, args = int(args[1]), args[2:]
for path in args:
    rows = []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 6:
                rows.append((float(p[0]), p[1], int(p[2]), int(p[3]), int(p[4]), float(p[5])))
    if not rows:
        print(f"{path}: empty")
        continue
    t0 = min(r[0] for r in rows)
    t1 = max(r[0] + r[5] / 1e3 for r in rows)
    span = t1 - t0
    print(f"{path}: {len(rows)} calls over {span:.3f} s")
    for kind in ("prefill", "step", "flow", "vocoder", "held", "yield", "pause", "admit", "check", "tokens", "lock"):
        rs = [r for r in rows if r[1] == kind]
        if not rs:
            continue
        ms = [r[5] for r in rs]
        busy = sum(ms) / 1e3
        print(f"  {kind:8s} n {len(rs):5d}  rows mean {sum(r[2] for r in rs) / len(rs):6.1f}  "
              f"ms mean {sum(ms) / len(ms):7.2f} p95 {pct(ms, 0.95):7.2f}  busy {100 * busy / span:5.1f}%"
              + (f"  firsts {sum(r[4] for r in rs)}" if kind in ("flow", "vocoder") else ""))
    st = sorted(r[0] for r in rows if r[1] == "step")
    if len(st) > 1:
        gaps = [b - a for a, b in zip(st, st[1:])]
        print(f"  step interval: mean {1e3 * sum(gaps) / len(gaps):.2f} ms, p50 {1e3 * pct(gaps, 0.5):.2f}, "
              f"p95 {1e3 * pct(gaps, 0.95):.2f}, max {1e3 * max(gaps):.2f}")
    fl = sorted((r[0], r[0] + r[5] / 1e3, r[2], r[4]) for r in rows if r[1] == "flow")
    if fl:
        gaps, end = [], t0
        for a, b, _, _ in fl:
            if a - end >= 0.004:
                gaps.append((a - end, end - t0))
            end = max(end, b)
        if t1 - end >= 0.004:
            gaps.append((t1 - end, end - t0))
        busy, cs, ce = 0.0, None, None
        for a, b, _, _ in fl:
            if cs is None or a > ce:
                busy += (ce - cs) if cs is not None else 0.0
                cs, ce = a, b
            else:
                ce = max(ce, b)
        busy += ce - cs
        big = max(gaps) if gaps else (0.0, 0.0)
        print(f"  flow idle: {1e3 * (span - busy):.1f} ms of {1e3 * span:.1f} ({len(gaps)} gaps of 4 ms "
              f"or more, {1e3 * sum(g[0] for g in gaps):.1f} ms; the largest {1e3 * big[0]:.1f} ms "
              f"at {1e3 * big[1]:.1f} ms)")
        later = [c for c in fl if c[3] == 0]
        print(f"  flow calls: {len(fl) - len(later)} with first chunks, {len(later)} of later chunks "
              f"only ({sum(1 for c in later if c[2] <= 8)} of at most 8 jobs)")
    timeline(rows, n_timeline)
