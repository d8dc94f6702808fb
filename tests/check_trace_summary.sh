#!/usr/bin/env bash
# check_trace_summary.sh - bench/trace_summary.py on a real scheduler trace: bench_w1 at C = 1 on
# the CPU with the small model and COSY_SCHED_TRACE, then the summary and --timeline 2. Run by
# `make test-bench` (part of `make test`), which passes B, TEST_MODEL and PYTHON; a few seconds.
#   - the summary: a line for the prefills (2 requests after 1 warm-up: 3), the steps, the flow
#     and vocoder calls; the flow's idle line and its calls by kind (3 with first chunks);
#   - the timeline: 2 requests, each with a flow and a vocoder call, its first flow call a first
#     chunk, and an end no earlier than its last step's end (tail >= 0) nor its last call's;
#   - a bad --timeline exits non-zero with the usage line.
# SKIP without the test model (make converts it from the small reference checkpoint under
# SHARED_DIR: docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/bench_inputs.sh
bench_inputs check_trace_summary
PY=${PYTHON:-python3}
fail=0
bad() { echo "FAIL: check_trace_summary: $*"; fail=1; }

if ! COSY_SCHED_TRACE="$tmp/trace.txt" "$BW" -m "$TEST_MODEL" --device -1 --tokens 30 --warmup 1 \
     --concurrency 1 --requests 2 --texts "$tmp/texts.txt" --prompt-wav "$tmp/prompt.wav" > "$tmp/w1.log" 2>&1; then
  cat "$tmp/w1.log"; bad "bench_w1 with COSY_SCHED_TRACE failed"
fi
[ -s "$tmp/trace.txt" ] || bad "no trace written"
"$PY" bench/trace_summary.py --timeline 2 "$tmp/trace.txt" > "$tmp/sum.txt" || bad "trace_summary.py failed"
for k in prefill step flow vocoder; do
  grep -qE "^  $k +n +[0-9]+ " "$tmp/sum.txt" || bad "no $k line in the summary"
done
grep -qE "^  flow idle: [0-9.]+ ms of [0-9.]+ \([0-9]+ gaps" "$tmp/sum.txt" || bad "no flow idle line"
# C = 1 with 1 warm-up and 2 requests: each request's first flow call has its first chunk
nf=$(sed -nE 's/^  flow calls: ([0-9]+) with first chunks.*/\1/p' "$tmp/sum.txt")
[ "$nf" = 3 ] || bad "flow calls with first chunks: '$nf', not 3"
np=$(awk '$1 == "prefill" { print $3 }' "$tmp/sum.txt")
[ "$np" = 3 ] || bad "prefills: $np, not 3 (1 warm-up + 2 requests)"
[ "$(grep -c '^  request: prefill' "$tmp/sum.txt")" = 2 ] || bad "the timeline has not 2 requests"
"$PY" - "$tmp/sum.txt" <<'PYEOF' || bad "a request's timeline is inconsistent (above)"
import re, sys
reqs, cur = [], None
for line in open(sys.argv[1]):
    if line.startswith("  request: prefill"):
        m = re.search(r"steps [0-9.]+ ms from ([0-9.]+) to ([0-9.]+) ms", line)
        cur = {"last_step": float(m.group(2)) if m else 0.0, "calls": []}
        reqs.append(cur)
    elif cur is not None and re.match(r"^    (flow|vocoder|pause) ", line):
        p = line.split()
        cur["calls"].append((p[0], float(p[2]), int(p[7]), float(p[-1])))
    elif cur is not None and line.startswith("    end "):
        m = re.match(r"    end ([0-9.]+) ms, tail after the last step (-?[0-9.]+) ms", line)
        cur["end"], cur["tail"] = float(m.group(1)), float(m.group(2))
ok = len(reqs) == 2
for q in reqs:
    kinds = [c[0] for c in q["calls"]]
    flows = [c for c in q["calls"] if c[0] == "flow"]
    good = ("flow" in kinds and "vocoder" in kinds and flows[0][2] == 1 and "end" in q and
            q["tail"] >= 0 and abs(q["end"] - q["last_step"] - q["tail"]) < 0.11 and
            all(q["end"] + 0.11 >= c[3] for c in q["calls"]))
    if not good:
        print(q)
    ok = ok and good
sys.exit(0 if ok else 1)
PYEOF
if "$PY" bench/trace_summary.py --timeline x "$tmp/trace.txt" > "$tmp/bad.txt" 2>&1; then
  bad "--timeline x exited 0"
fi
grep -q "usage: trace_summary.py" "$tmp/bad.txt" || bad "--timeline x: no usage line"
[ $fail = 0 ] && echo "PASS: check_trace_summary (trace_summary.py on a C = 1 trace: summary, timeline of 2 requests)"
exit $fail
