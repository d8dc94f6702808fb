#!/usr/bin/env bash
# check_bench_multi.sh - bench_w1 with a list of devices (one engine per entry, clients spread
# over them), on the CPU: `--device -1,-1` runs two CPU engines with the small model. Run by `make
# test-bench` (part of `make test`), which passes B and TEST_MODEL; a few seconds.
#   - two engines: exit 0, the level's row over all requests (4), one row per engine (e0, e1:
#     2 requests each, clients k % 2), batch and util lines per engine, W2 spread alike;
#   - one device (`--device -1`) prints no engine rows: the output of one device is unchanged;
#   - --hash: the "audio bits" line (a hash of every request's samples, in request order) is the
#     same at C = 1, at C = 2, offline and over two engines (the same requests make the same
#     audio whatever runs beside them), and differs for requests of another length.
# SKIP without the test model (make converts it from the small reference checkpoint under
# SHARED_DIR: docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/bench_inputs.sh
bench_inputs check_bench_multi
ARGS=(-m "$TEST_MODEL" --tokens 20 --warmup 1 --texts "$tmp/texts.txt" --prompt-wav "$tmp/prompt.wav")
fail=0
bad() { echo "FAIL: check_bench_multi: $*"; fail=1; }

if ! "$BW" "${ARGS[@]}" --device -1,-1 --concurrency 2 --requests 4 --offline 4 > "$tmp/two.log" 2>&1; then
  cat "$tmp/two.log"; bad "bench_w1 --device -1,-1 failed"
fi
row() { awk -v k="$1" '$1 == k { print $2; exit }' "$tmp/$2"; }
[ "$(row 2 two.log)" = 4 ] || bad "two engines: the level's row does not count 4 requests"
[ "$(row e0 two.log)" = 2 ] || bad "two engines: e0 did not serve 2 requests"
[ "$(row e1 two.log)" = 2 ] || bad "two engines: e1 did not serve 2 requests"
grep -q "devices -1,-1 (2 engines)" "$tmp/two.log" || bad "two engines: no devices line"
[ "$(grep -c -E '^ +batches e[01]:' "$tmp/two.log")" = 4 ] || bad "two engines: batch lines per engine (W1 and W2)"
[ "$(grep -c -E '^ +gpu util e[01]:' "$tmp/two.log")" = 4 ] || bad "two engines: util lines per engine"
[ "$(grep -c -E '^ +e[01]: 2 requests' "$tmp/two.log")" = 2 ] || bad "two engines: W2 not spread 2 + 2"
grep -q "requests failed" "$tmp/two.log" && bad "two engines: requests failed"

if ! "$BW" "${ARGS[@]}" --device -1 --concurrency 2 --requests 4 > "$tmp/one.log" 2>&1; then
  cat "$tmp/one.log"; bad "bench_w1 --device -1 failed"
fi
[ "$(row 2 one.log)" = 4 ] || bad "one engine: the level's row does not count 4 requests"
grep -q -E '^ +e[0-9]|engines|batches e|gpu util e' "$tmp/one.log" && bad "one engine: engine rows printed"
grep -q "device -1, " "$tmp/one.log" || bad "one engine: the model line changed"

# --hash: the same three requests alone, two at a time, all at once and over two engines
"$BW" "${ARGS[@]}" --device -1 --concurrency 1,2 --requests 3 --offline 3 --hash > "$tmp/h1.log" 2>&1 ||
  { cat "$tmp/h1.log"; bad "bench_w1 --hash failed"; }
"$BW" "${ARGS[@]}" --device -1,-1 --concurrency 2 --requests 3 --hash > "$tmp/h2.log" 2>&1 ||
  { cat "$tmp/h2.log"; bad "bench_w1 --device -1,-1 --hash failed"; }
"$BW" "${ARGS[@]}" --device -1 --concurrency 1 --requests 3 --tokens 21 --hash > "$tmp/h3.log" 2>&1 ||
  { cat "$tmp/h3.log"; bad "bench_w1 --tokens 21 --hash failed"; }
hashes=$(cat "$tmp/h1.log" "$tmp/h2.log" | sed -n 's/^ *audio bits: \([0-9a-f]\{16\}\) (3 requests.*/\1/p')
[ "$(echo "$hashes" | grep -c .)" = 4 ] || bad "--hash: not four audio bits lines of 3 requests (C = 1, C = 2, offline, two engines)"
[ "$(echo "$hashes" | sort -u | grep -c .)" = 1 ] || bad "--hash: the audio bits differ between C = 1, C = 2, offline and two engines: $(echo $hashes)"
other=$(sed -n 's/^ *audio bits: \([0-9a-f]\{16\}\) .*/\1/p' "$tmp/h3.log")
[ -n "$other" ] && [ "$other" != "$(echo "$hashes" | head -1)" ] || bad "--hash: requests of 21 tokens gave the same audio bits as of 20 ($other)"
grep -q "audio bits" "$tmp/one.log" && bad "audio bits printed without --hash"

if [ $fail = 0 ]; then
  echo "check_bench_multi: two CPU engines (--device -1,-1): rows per engine and in all; one device unchanged; --hash $(echo "$hashes" | head -1) at C = 1, 2, offline and on two engines"
else
  echo "--- two engines"; cat "$tmp/two.log"; echo "--- one engine"; cat "$tmp/one.log"
fi
exit $fail
