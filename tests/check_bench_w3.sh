#!/usr/bin/env bash
# check_bench_w3.sh - workload W3 (live users: bench_w1 --users, docs/scheduler.md section 6) on
# the CPU with the small model and tiny numbers: 2 users, a level of 3 s, arrivals over 1 s, the
# first 0.5 s not counted, utterances of 0.4-0.8 s, think time of mean 0.2 s. It must work, not be
# fast: exit 0, the level's row and the summary's row with 2 users, at least one counted request
# (with seed 1 user 1 arrives at 0.91 s: after the 0.5 s not counted) and one not counted (user 0
# arrives at 0.03 s), no failed request, a TTFB, an xRT and batch sizes, the headline line; bad W3
# options exit 2. Run by `make test-bench` (part of `make test`), which passes B and TEST_MODEL;
# about 10 s. SKIP without the test model (make converts it from the small reference checkpoint
# under SHARED_DIR: docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/bench_inputs.sh
bench_inputs check_bench_w3
ARGS=(-m "$TEST_MODEL" --warmup 1 --texts "$tmp/texts.txt" --prompt-wav "$tmp/prompt.wav" --device -1)
W3=(--users 2 --level-s 3 --spread 1 --skip 0.5 --think 0.2 --utter 0.4,0.8 --seed 1)
fail=0
bad() { echo "FAIL: check_bench_w3: $*"; fail=1; }

rc=0
"$BW" "${ARGS[@]}" "${W3[@]}" > "$tmp/w3.log" 2>&1 || rc=$?
[ $rc = 0 ] || bad "bench_w1 ${W3[*]} exited $rc"
# the rows of users 2: the level's, then the summary's (columns: users reqs fail p50 p95 p99
# underrun late_max xRT llm_b/max flow_b/max voc_b act/queue ok)
rows=$(awk '$1 == "2" && NF == 14' "$tmp/w3.log")
[ "$(echo "$rows" | grep -c .)" = 2 ] || bad "not two rows of 2 users (the level's and the summary's)"
[ "$(echo "$rows" | sed -n 1p)" = "$(echo "$rows" | sed -n 2p)" ] || bad "the summary's row differs from the level's"
row=$(echo "$rows" | sed -n 1p)
read -r u reqs nfail p50 p95 p99 under late xrt llm flow voc actq ok <<< "$row" || true
[ "${reqs:-0}" -ge 1 ] 2>/dev/null || bad "no counted request ($row)"
[ "${nfail:-1}" = 0 ] || bad "failed requests ($row)"
awk -v v="${p50%ms}" 'BEGIN { exit !(v > 0) }' || bad "no TTFB p50 ($row)"
awk -v a="${p50%ms}" -v b="${p95%ms}" -v c="${p99%ms}" 'BEGIN { exit !(a <= b && b <= c) }' || bad "percentiles out of order ($row)"
awk -v v="$xrt" 'BEGIN { exit !(v > 0) }' || bad "no xRT ($row)"
awk -v v="${llm%%/*}" 'BEGIN { exit !(v >= 1) }' || bad "no LLM batch size ($row)"
case "$ok" in yes | no) ;; *) bad "no ok column ($row)" ;; esac
nc=$(sed -n 's/.* \([0-9]*\) submitted in the first 0.5 s not counted.*/\1/p' "$tmp/w3.log")
[ "${nc:-0}" -ge 1 ] || bad "no request of the first 0.5 s left out of the count"
grep -q '^W3 summary' "$tmp/w3.log" || bad "no summary"
grep -qE '^W3 headline: ' "$tmp/w3.log" || bad "no headline"
grep -qE '^ +batches \(counted window\): llm [0-9.]+ rows/step' "$tmp/w3.log" || bad "no batch line"
grep -q "requests failed" "$tmp/w3.log" && bad "requests failed"
[ "$(tail -1 "$tmp/w3.log" | cut -c1-12)" = "W3 headline:" ] || bad "the headline is not the last line"

# bad options: exit 2 with a message naming the option
for b in "--users 0" "--users 2,x" "--level-s 0" "--skip 3" "--utter 3,2" "--utter 2" "--think -1"; do
  rc=0
  # shellcheck disable=SC2086
  "$BW" "${ARGS[@]}" "${W3[@]}" $b > "$tmp/bad.log" 2>&1 || rc=$?
  [ $rc = 2 ] || bad "$b: exit $rc, not 2"
  opt=${b%% *}
  [ "$opt" = "--skip" ] && opt="--level-s"
  grep -q -- "$opt" "$tmp/bad.log" || bad "$b: the message does not name $opt"
done

if [ $fail = 0 ]; then
  echo "check_bench_w3: W3 on the CPU (2 users, 3 s level): $row"
else
  cat "$tmp/w3.log"
fi
exit $fail
