#!/usr/bin/env bash
# check_knobs.sh - the library's environment knobs stay in one place (lib/knobs.c) and in one table
# (docs/knobs.md).
#
#   bash tools/check_knobs.sh        (from anywhere; `make check-knobs`, run by `make test`)
#
# Fails when
#   - a file of lib/ or kernels/ other than lib/knobs.c calls getenv (or secure_getenv): a knob is
#     read in lib/knobs.c into struct cosy_knobs (lib/knobs.h) and passed to whoever needs it;
#   - a COSY_* variable that lib/knobs.c reads has no row in docs/knobs.md's table "The knobs";
#   - a test or benchmark program sets a COSY_* variable (setenv in tests/ or bench/ C files) that
#     lib/knobs.c does not read: a test of a removed knob, which would pass without testing.
# The test and benchmark programs may read variables of their own (tests/, bench/, examples/).
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 1
export LC_ALL=C
fail=0
DOC=docs/knobs.md
[ -f "$DOC" ] || { echo "check_knobs: $DOC is missing"; exit 1; }

# 1. getenv outside lib/knobs.c
hits=$(grep -rnE '\b(secure_)?getenv[[:space:]]*\(' lib kernels --include='*.c' --include='*.h' \
         --include='*.cu' --include='*.cuh' --include='*.cpp' | grep -v '^lib/knobs\.c:' || true)
if [ -n "$hits" ]; then
  echo "check_knobs: getenv outside lib/knobs.c (read the knob in lib/knobs.c, pass the value):"
  echo "$hits"
  fail=1
fi

# the knobs named in the first column of a table row of docs/knobs.md's "## The knobs" section
documented=$(awk '/^## /{on = ($0 == "## The knobs")} on' "$DOC" | grep -oE '^\| *`COSY_[A-Z0-9_]+' |
               grep -oE 'COSY_[A-Z0-9_]+' | sort -u)

# 2. every knob lib/knobs.c reads has a row
read_names=$(grep -oE '"COSY_[A-Z0-9_]+"' lib/knobs.c | tr -d '"' | sort -u)
[ -n "$read_names" ] || { echo "check_knobs: no knob found in lib/knobs.c"; fail=1; }
for k in $read_names; do
  if ! grep -qxF "$k" <<<"$documented"; then
    echo "check_knobs: $k (lib/knobs.c) has no row in $DOC"
    fail=1
  fi
done

# 3. variables the test and benchmark programs set for the library
set_names=$(grep -rhoE '\bsetenv\("COSY_[A-Z0-9_]+"' tests bench --include='*.c' |
              grep -oE 'COSY_[A-Z0-9_]+' | sort -u)
for k in $set_names; do
  if ! grep -qxF "$k" <<<"$read_names"; then
    echo "check_knobs: a test or benchmark sets $k, which lib/knobs.c does not read (a removed knob?)"
    fail=1
  fi
done

if [ "$fail" = 0 ]; then
  echo "check_knobs: $(wc -w <<<"$read_names") knobs, all read in lib/knobs.c and listed in $DOC"
fi
exit $fail
