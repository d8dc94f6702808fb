#!/usr/bin/env bash
# tests/fuzz/campaign.sh - the long fuzzing run recorded in tests/fuzz/README.md.
#
#   bash tests/fuzz/campaign.sh [RUNS] [TARGET...]     (after `make fuzz`; default 2000000 runs,
#                                                       targets gguf model voice wav tokenizer)
# Each target runs RUNS executions from its seeds, the saved regression inputs and its corpus of
# earlier campaigns (build/fuzz/campaign/<target>, grown in place), one process at a time, at
# nice 10. Logs: build/fuzz/campaign/<target>.log; crashes: build/fuzz/campaign/artifacts/.
# FUZZ_ARGS (environment) are added to libFuzzer's flags, e.g. FUZZ_ARGS=-max_total_time=3000 to
# stop a target at a time limit before RUNS.
set -u
cd "$(dirname "$0")/../.."
RUNS=${1:-2000000}
shift || true
TARGETS=${*:-gguf model voice wav tokenizer}
B=build/fuzz
C=$B/campaign
mkdir -p "$C/artifacts"
declare -A DICT=([gguf]=gguf [model]=gguf [voice]=gguf [wav]=wav [mel]=wav [tokenizer]=tokenizer [text]=tokenizer [api]=tokenizer [textstream]=textstream)
declare -A MAXLEN=([gguf]=65536 [model]=65536 [voice]=65536 [wav]=16384 [mel]=16384 [tokenizer]=4096 [text]=1024 [api]=512 [textstream]=1024)
for t in $TARGETS; do
  mkdir -p "$C/$t" "tests/fuzz/regressions/$t"
  env=()
  if [ "$t" = tokenizer ] && [ -n "${COSY_FUZZ_TOK_MODEL:-}" ]; then env=(COSY_FUZZ_MODEL="$COSY_FUZZ_TOK_MODEL"); fi
  start=$(date +%s)
  env "${env[@]}" nice -n 10 "./$B/fuzz_$t" -runs="$RUNS" -timeout=30 -rss_limit_mb=4096 \
    -max_len="${MAXLEN[$t]}" -dict="$B/dict/${DICT[$t]}.dict" -artifact_prefix="$C/artifacts/$t-" \
    -print_final_stats=1 ${FUZZ_ARGS:-} "$C/$t" "$B/seeds/$t" "tests/fuzz/regressions/$t" > "$C/$t.log" 2>&1
  rc=$?
  echo "$t: rc $rc, $(( $(date +%s) - start )) s, $(grep -E '^#[0-9]+ +DONE|stat::number_of_executed_units' "$C/$t.log" | tr '\n' ' ')"
done
