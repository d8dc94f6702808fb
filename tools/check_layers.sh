#!/usr/bin/env bash
# check_layers.sh - fails when files of lib/ call each other in a circle (docs/architecture.md
# draws the layers this keeps).
#
#   bash tools/check_layers.sh [BUILD_DIR [OBJECT...]]   (`make check-layers`, run by `make test`)
#   bash tools/check_layers.sh --self-test   (three small files in a circle must fail the check)
#
# BUILD_DIR defaults to build; the objects, to every BUILD_DIR/obj/lib/**/*.o (the Makefile passes
# the ones of its source list, so an object left from a deleted source does not count).
#
# The call graph comes from the compiled objects, not from the sources: for each object under
# BUILD_DIR/obj/lib/ (one per lib/**/*.c), `nm` lists the global symbols it defines and the ones
# it leaves undefined; file A depends on file B when A uses a symbol that B defines. A cycle
# between files (A uses B, B uses ... uses A) fails the check, printed with one symbol for each
# edge. Calls through function pointers (hooks a layer registers with the one below) are no
# edges, which is the point: the layer below never names the layer above. Symbols defined by
# kernels/ or outside the library are ignored. Needs the objects (make builds them first).
set -u -o pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
NM=${NM:-nm}

if [ "${1:-}" = --self-test ]; then
  d=$(mktemp -d)
  trap 'rm -rf "$d"' EXIT
  mkdir -p "$d/obj/lib"
  printf 'int b(int);\nint a(int x) { return x ? b(x - 1) : 0; }\n' > "$d/a.c"
  printf 'int c(int);\nint b(int x) { return x ? c(x - 1) : 1; }\n' > "$d/b.c"
  printf 'int a(int);\nint c(int x) { return x ? a(x - 1) : 2; }\nint d(int x) { return x; }\n' > "$d/c.c"
  printf 'int d(int);\nint e(int x) { return d(x); }\n' > "$d/e.c"
  for f in a b c e; do ${CC:-cc} -c -o "$d/obj/lib/$f.o" "$d/$f.c" || exit 1; done
  out=$(bash "$0" "$d" 2>&1)
  if [ $? = 0 ] || ! grep -q 'lib/c.c -> lib/a.c' <<< "$out" || grep -q 'lib/e.c' <<< "$out"; then
    echo "check-layers --self-test: the circle lib/a.c -> lib/b.c -> lib/c.c -> lib/a.c was not" \
         "reported as it should be (or lib/e.c was). Output:"
    echo "$out"
    exit 1
  fi
  echo "check-layers --self-test: a circle of three files is found"
  exit 0
fi

B=${1:-build}
[ $# -gt 0 ] && shift
if [ $# -gt 0 ]; then
  objs=$(printf '%s\n' "$@" | sort)
else
  objs=$(find "$B/obj/lib" -name '*.o' 2>/dev/null | sort)
fi
if [ -z "$objs" ]; then
  echo "check-layers: no objects under $B/obj/lib (build the library first)"
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# defs: "symbol file"; uses: "symbol file"
for o in $objs; do
  f=${o#"$B"/obj/}
  f=${f%.o}.c
  "$NM" --defined-only -g "$o" | awk -v f="$f" 'NF >= 3 { print $3, f }' >> "$tmp/defs"
  "$NM" -u "$o" | awk -v f="$f" '{ print $NF, f }' >> "$tmp/uses"
done
sort -u -o "$tmp/defs" "$tmp/defs"
sort -u -o "$tmp/uses" "$tmp/uses"
# edges: "user definer symbol" (one symbol per edge, the first in C order)
join "$tmp/uses" "$tmp/defs" | awk '$2 != $3 && !(($2 " " $3) in seen) { seen[$2 " " $3] = 1; print $2, $3, $1 }' \
  | sort > "$tmp/edges"

# tsort reports a loop and drops one of its edges to go on; remove each reported loop's edges
# and ask again until none is left, so every cycle is printed
rc=0
cut -d' ' -f1,2 "$tmp/edges" > "$tmp/pairs"
for round in $(seq 1 50); do
  tsort "$tmp/pairs" 2>&1 >/dev/null | awk '/input contains a loop/ { if (l != "") print l; l = ""; next }
    /^tsort: [^ ]*$/ { l = l (l == "" ? "" : " ") $2 } END { if (l != "") print l }' > "$tmp/loops"
  [ -s "$tmp/loops" ] || break
  rc=1
  while read -r loop; do
    # tsort lists a loop's files in order; print each edge between neighbours (closing the ring)
    set -- $loop
    first=$1
    echo "check-layers: files of lib/ in a circle:"
    prev=""
    for f in "$@" "$first"; do
      if [ -n "$prev" ]; then
        sym=$(awk -v a="$prev" -v b="$f" '$1 == a && $2 == b { print $3 }' "$tmp/edges")
        [ -n "$sym" ] || sym="used by: $(awk -v a="$f" -v b="$prev" '$1 == a && $2 == b { print $3 }' "$tmp/edges")"
        echo "  $prev -> $f   ($sym)"
        grep -v -x -F -e "$prev $f" -e "$f $prev" "$tmp/pairs" > "$tmp/p2" || true
        mv "$tmp/p2" "$tmp/pairs"
      fi
      prev=$f
    done
  done < "$tmp/loops"
done
if [ "$rc" = 0 ]; then
  echo "check-layers: $(wc -l < "$tmp/edges") calls between $(echo "$objs" | wc -w) files of lib/, no circle"
fi
exit $rc
