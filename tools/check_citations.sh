#!/usr/bin/env bash
# check_citations.sh - fails when a comment or a document of the repository cites a document that
# is not in the repository.
#
#   bash tools/check_citations.sh        (from anywhere; `make check-citations`, run by `make test`)
#
# Every explanation the code points to must be a place in this repository (docs/*.md and their
# sections, a file, a function), or say what it means in its own words: a reader with only this
# repository must be able to follow it. Flagged, in the tracked source and documentation files
# (C, CUDA, Python, Go, Rust, C++, shell, make, Markdown, text): citations of an outside model
# specification ("spec section 3", "spec 2.3", "the spec"), of outside planning documents
# (DESIGN.md, API.md, KINDS.md, METHOD, notes/..., ../shared/spec, ../shared/golden/README.md),
# of tool-library folders (.library), of task texts ("the brief", "issue 9").
#
# Reading DATA from the shared reference directory at run time is legitimate and is not flagged:
# ../shared/golden/..., ../shared/tokenizer, ../shared/audio/..., ../shared/bench/... are paths,
# not citations. Raw measurement logs (bench/results/) are records, not explanations, and are not
# searched. A line that must mention such a name for another reason goes into the allow-list
# tools/citations.allow ("path:regex" per line, matched against "path:line-text").
#
# The model's semantics, in the project's own words, are in docs/model.md; cite its sections.
set -u -o pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

PATTERN='\bspec(ification)? (sections? |§ ?)?[0-9]|\bthe spec(ification)?\b|\bspec'"'"'s\b|\bvs spec\b'
PATTERN+='|spec/cosyvoice|cosyvoice3\.md|\bDESIGN\.md|\bAPI\.md|\bKINDS\.md|\bMETHOD\b|(^|[^a-z_])notes/'
PATTERN+='|\.\./shared/(spec|notes|hooks|DESIGN|API)|golden/README|golden README|[Tt]he README (measures|measured)|\.library\b'
PATTERN+='|\bthe brief\b|\bbrief'"'"'s\b|\b[Ii]ssues? #?[0-9]+|\bthe issue('"'"'s| allows)\b'

ALLOW=tools/citations.allow
SELF=tools/check_citations.sh

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  FILES=$(git ls-files -co --exclude-standard)
else
  FILES=$(find . -type f -not -path './build/*' -not -path './.git/*' | sed 's|^\./||')
fi
FILES=$(printf '%s\n' "$FILES" | grep -E '\.(c|h|cu|cuh|py|md|sh|mk|go|rs|cpp|hpp|cc|txt|toml|in|map)$|(^|/)Makefile$' |
  grep -vE '^(bench/results/|build/)' | grep -vxF "$SELF" | grep -vxF "$ALLOW" || true)

hits=$(printf '%s\n' "$FILES" | tr '\n' '\0' | xargs -0 -r grep -nHE "$PATTERN" 2>/dev/null || true)
if [ -n "$hits" ] && [ -f "$ALLOW" ]; then
  while IFS= read -r a; do
    case "$a" in ''|'#'*) continue ;; esac
    hits=$(printf '%s\n' "$hits" | grep -vE "^${a%%:*}:[0-9]+:.*${a#*:}" || true)
  done < "$ALLOW"
fi
if [ -n "$hits" ]; then
  echo "check-citations: these lines cite documents outside the repository; cite docs/*.md (docs/model.md"
  echo "for the model's semantics) or say it in your own words (tools/check_citations.sh says why):"
  printf '%s\n' "$hits"
  exit 1
fi
echo "check-citations: $(printf '%s\n' "$FILES" | wc -l) files cite only the repository"
