#!/usr/bin/env bash
# check_bench.sh - fails when a raw benchmark log is cited but missing, or kept but never cited.
#
#   bash tools/check_bench.sh        (from anywhere; `make check-bench`, run by `make test`)
#
# The raw logs behind bench/RESULTS.md and bench/HISTORY.md live in bench/results/, one
# xz-compressed tar archive per device session. A document or comment cites a log as
# `bench/results/ARCHIVE.tar.xz:MEMBER` (MEMBER: a path inside the archive, a folder ending in
# "/", or a shell pattern: `s16/e/c64_*.log`; `<call>` stands for any one name) or an archive (or
# any other file there) as `bench/results/NAME`. Checked, over the tracked and untracked source
# and documentation files (bench/results/ itself left out):
#   1. every cited file of bench/results/ exists, and every cited member is in its archive;
#   2. every file of bench/results/ is cited somewhere (a log nobody cites is not kept: drop it,
#      or cite it where its number is written).
# Written-out placeholders are not citations: a name with a capital letter (`sNN.tar.xz`,
# `ARCHIVE`) is skipped, and `bench/results/` alone names the folder.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
export LC_ALL=C
R=bench/results
SELF=tools/check_bench.sh

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  FILES=$(git ls-files -co --exclude-standard)
else
  FILES=$(find . -type f -not -path './build/*' -not -path './.git/*' | sed 's|^\./||')
fi
FILES=$(printf '%s\n' "$FILES" | grep -E '\.(c|h|cu|cuh|py|md|sh|mk|go|rs|cpp|hpp|cc|txt|toml|in)$|(^|/)Makefile$' |
  grep -vE "^($R/|build/)" | grep -vxF "$SELF" || true)

# every citation, as "file:line:citation"
cites=$(printf '%s\n' "$FILES" | tr '\n' '\0' |
  xargs -0 -r grep -noHE "$R/[A-Za-z0-9_.*<>/-]*(:[A-Za-z0-9_.*<>/{}-]+)?" 2>/dev/null || true)

fail=0
declare -A members cited # an archive's member list (read once), the files cited
while IFS= read -r c; do
  [ -n "$c" ] || continue
  where=${c%%:bench/results/*}
  ref=bench/results/${c#*:bench/results/}
  path=${ref%%:*}
  member=""
  [[ "$ref" == *:* ]] && member=${ref#*:}
  path=${path%.}                                  # a sentence's full stop
  member=${member%.}
  name=${path#"$R"}
  name=${name#/}
  [ -z "$name" ] && continue                       # the folder itself
  [[ "$name" =~ [A-Z] ]] && continue               # a written-out placeholder
  if [ ! -e "$path" ]; then
    echo "check-bench: $where: $path is cited but not in the repository"
    fail=1
    continue
  fi
  cited[$path]=1
  [ -n "$member" ] || continue
  if [[ "$path" != *.tar.xz ]]; then
    echo "check-bench: $where: $path:$member: only a .tar.xz archive has members"
    fail=1
    continue
  fi
  if [ -z "${members[$path]+x}" ]; then
    if ! list=$(tar -tJf "$path" 2>&1); then
      echo "check-bench: cannot list $path (tar with xz is needed): $(printf '%s' "$list" | head -1)"
      fail=1
      members[$path]=""
      continue
    fi
    members[$path]=$(printf '%s\n' "$list" | grep -v '/$' || true)
  fi
  pat=$(printf '%s' "$member" | sed -E 's/<[^>]*>/*/g')
  found=0
  while IFS= read -r m; do
    # shellcheck disable=SC2053
    if [[ "$m" == $pat ]] || { [[ "$pat" == */ ]] && [[ "$m" == $pat* ]]; }; then found=1; break; fi
  done <<< "${members[$path]}"
  if [ $found = 0 ]; then
    echo "check-bench: $where: $member is not in $path"
    fail=1
  fi
done <<< "$cites"

n=0
while IFS= read -r f; do
  [ -n "$f" ] || continue
  n=$((n + 1))
  if [ -z "${cited[$f]+x}" ]; then
    echo "check-bench: $f is cited nowhere (cite it where its numbers are written, or drop it)"
    fail=1
  fi
done < <(find "$R" -type f 2>/dev/null | sort)

if [ $fail != 0 ]; then
  echo "check-bench: FAILED (tools/check_bench.sh says what it checks)"
  exit 1
fi
echo "check-bench: $n files in $R, every one cited, every citation found"
