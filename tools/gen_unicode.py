#!/usr/bin/env python3
"""gen_unicode.py - write lib/unicode_data.h and lib/unicode_data.c from Python's unicodedata.

The text tokenizer (lib/tokenizer.c) needs four Unicode properties, stored as compact sorted
tables that the C code binary-searches:

  cosy_uc_class[]   ranges [lo, hi] of general category L* (class 1) and N* (class 2);
                    everything else is class 0. (White_Space is a fixed list of 25 code points,
                    hard-coded in tokenizer.c; Python does not expose that property.)
  cosy_uc_ccc[]     ranges [lo, hi] of one non-zero canonical combining class.
  cosy_uc_decomp[]  every code point whose full canonical decomposition (NFD of the single
                    character) differs from itself, except the Hangul syllables (algorithmic):
                    (cp, offset, length) into cosy_uc_decomp_cps[].
  cosy_uc_comp[]    the primary composites: (first, second) -> composite for every canonical
                    two-character decomposition whose composite survives NFC (i.e. not in the
                    composition exclusions, not a singleton, not a non-starter decomposition),
                    sorted by (first, second). Hangul is again algorithmic.

Matching the reference tokenizer (HF tokenizers, which produced the golden ids) exactly needs two
adjustments to Python's data, because HF mixes Unicode versions:
  * its pre-tokenizer regex (Oniguruma) knows Unicode 16.0: HF_REGEX_EXTRA below lists the letters
    and numbers that Python 3.11's Unicode 14.0 does not have yet (Unicode 15.0-16.0 additions);
  * its NFC normalizer (the unicode-normalization-alignments crate) has Unicode 9.0 data: the
    combining marks of HF_NFC_CCC0 (added in Unicode 10-14) have combining class 0 there, and the
    composition of HF_NFC_NO_COMPOSE (Unicode 13) is unknown (nor is its decomposition).
Both lists were measured against tokenizers 0.23.3 with `--measure` (needs `pip install tokenizers`),
which probes every code point and prints the lists again; re-measure when either side changes.

Usage: python3 tools/gen_unicode.py [OUTDIR]   (default: lib/ next to this script's parent)
       python3 tools/gen_unicode.py --measure
The output depends only on unicodedata.unidata_version (recorded in the files) and the lists below.
"""
import os
import sys
import unicodedata as ud

MAXCP = 0x110000
PY_UNIDATA = "14.0.0"   # the version the HF_* lists were measured against

# (lo, hi, class): 1 letter, 2 number; code points the HF regex classes as \p{L} / \p{N} beyond
# Python's Unicode 14.0 data
HF_REGEX_EXTRA = [
    (0x1C89, 0x1C8A, 1), (0xA7CB, 0xA7CD, 1), (0xA7DA, 0xA7DC, 1), (0x105C0, 0x105F3, 1),
    (0x10D40, 0x10D49, 2), (0x10D4A, 0x10D65, 1), (0x10D6F, 0x10D85, 1), (0x10EC2, 0x10EC4, 1),
    (0x1123F, 0x11240, 1), (0x11380, 0x11389, 1), (0x1138B, 0x1138B, 1), (0x1138E, 0x1138E, 1),
    (0x11390, 0x113B5, 1), (0x113B7, 0x113B7, 1), (0x113D1, 0x113D1, 1), (0x113D3, 0x113D3, 1),
    (0x116D0, 0x116E3, 2), (0x11BC0, 0x11BE0, 1), (0x11BF0, 0x11BF9, 2), (0x11F02, 0x11F02, 1),
    (0x11F04, 0x11F10, 1), (0x11F12, 0x11F33, 1), (0x11F50, 0x11F59, 2), (0x1342F, 0x1342F, 1),
    (0x13441, 0x13446, 1), (0x13460, 0x143FA, 1), (0x16100, 0x1611D, 1), (0x16130, 0x16139, 2),
    (0x16D40, 0x16D6C, 1), (0x16D70, 0x16D79, 2), (0x18CFF, 0x18CFF, 1), (0x1B132, 0x1B132, 1),
    (0x1B155, 0x1B155, 1), (0x1CCF0, 0x1CCF9, 2), (0x1D2C0, 0x1D2D3, 2), (0x1DF25, 0x1DF2A, 1),
    (0x1E030, 0x1E06D, 1), (0x1E4D0, 0x1E4EB, 1), (0x1E4F0, 0x1E4F9, 2), (0x1E5D0, 0x1E5ED, 1),
    (0x1E5F0, 0x1E5F0, 1), (0x1E5F1, 0x1E5FA, 2), (0x2B739, 0x2B739, 1), (0x2EBF0, 0x2EE5D, 1),
    (0x31350, 0x323AF, 1),
]
# (lo, hi): combining marks whose class is 0 in HF's NFC (not in its Unicode 9.0 data)
HF_NFC_CCC0 = [
    (0x7FD, 0x7FD), (0x898, 0x89F), (0x8CA, 0x8D3), (0x9FE, 0x9FE), (0xC3C, 0xC3C), (0xD3B, 0xD3C),
    (0xEBA, 0xEBA), (0x1715, 0x1715), (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFA), (0xA82C, 0xA82C),
    (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10F46, 0x10F50), (0x10F82, 0x10F85),
    (0x11070, 0x11070), (0x1133B, 0x1133B), (0x1145E, 0x1145E), (0x11839, 0x1183A),
    (0x1193D, 0x1193E), (0x11943, 0x11943), (0x119E0, 0x119E0), (0x11A34, 0x11A34),
    (0x11A47, 0x11A47), (0x11A99, 0x11A99), (0x11D42, 0x11D42), (0x11D44, 0x11D45),
    (0x11D97, 0x11D97), (0x16FF0, 0x16FF1), (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE),
    (0x1E2EC, 0x1E2EF),
]
# composites HF's NFC neither composes nor decomposes (a, b, composite)
HF_NFC_NO_COMPOSE = [(0x11935, 0x11930, 0x11938)]


def in_ranges(cp, rs):
    return any(r[0] <= cp <= r[1] for r in rs)
HANGUL_S0, HANGUL_SN = 0xAC00, 11172


def ranges(value_of):
    """[(lo, hi, v)] for maximal runs of equal non-zero v."""
    out = []
    for cp in range(MAXCP):
        v = value_of(cp)
        if v and out and out[-1][2] == v and out[-1][1] == cp - 1:
            out[-1][1] = cp
        elif v:
            out.append([cp, cp, v])
    return out


def cat_class(cp):
    c = ud.category(chr(cp))[0]
    v = 1 if c == "L" else 2 if c == "N" else 0
    if not v:
        for lo, hi, x in HF_REGEX_EXTRA:
            if lo <= cp <= hi:
                return x
    return v


def measure():
    """Probe HF tokenizers for every code point; print the HF_* lists for this Python's data."""
    from tokenizers import Regex, normalizers, pre_tokenizers
    pat = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
           r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    split = pre_tokenizers.Split(Regex(pat), behavior="isolated", invert=False)
    nfc = normalizers.NFC()

    def pieces(s):
        return len(split.pre_tokenize_str(s))

    extra, ccc0, nocomp = [], [], []
    for cp in range(MAXCP):
        if 0xD800 <= cp < 0xE000:
            continue
        x = chr(cp)
        c = ud.category(x)[0]
        py = 1 if c == "L" else 2 if c == "N" else 0
        if cp not in (9, 10, 11, 12, 13, 32):   # the probes below misread whitespace
            hf = 2 if pieces(x + x) == 2 else 1 if pieces("a" + x) == 1 else 0
            if hf != py:
                extra.append((cp, hf))
        if ud.combining(x) and nfc.normalize_str("a" + x + "\u0334") != ud.normalize("NFC", "a" + x + "\u0334"):
            ccc0.append((cp, 1))
        m = ud.decomposition(x)
        if m and not m.startswith("<"):
            p = [int(v, 16) for v in m.split()]
            if len(p) == 2 and ud.normalize("NFC", chr(p[0]) + chr(p[1])) == x and \
                    nfc.normalize_str(chr(p[0]) + chr(p[1])) != x:
                nocomp.append((p[0], p[1], cp))

    def runs(items):
        out = []
        for cp, v in items:
            if out and out[-1][2] == v and out[-1][1] == cp - 1:
                out[-1][1] = cp
            else:
                out.append([cp, cp, v])
        return out
    print("unicodedata", ud.unidata_version)
    print("HF_REGEX_EXTRA = [" + ", ".join("(0x%X, 0x%X, %d)" % tuple(r) for r in runs(extra)) + "]")
    print("HF_NFC_CCC0 = [" + ", ".join("(0x%X, 0x%X)" % tuple(r[:2]) for r in runs(ccc0)) + "]")
    print("HF_NFC_NO_COMPOSE = [" + ", ".join("(0x%X, 0x%X, 0x%X)" % r for r in nocomp) + "]")
    same = (runs(extra) == [list(r) for r in HF_REGEX_EXTRA] and
            [tuple(r[:2]) for r in runs(ccc0)] == HF_NFC_CCC0 and nocomp == HF_NFC_NO_COMPOSE)
    print("the lists in this script are", "up to date" if same else "OUT OF DATE")


def main():
    if sys.argv[1:2] == ["--measure"]:
        measure()
        return
    if ud.unidata_version != PY_UNIDATA:
        print(f"warning: unicodedata is {ud.unidata_version}, the HF_* lists were measured with "
              f"{PY_UNIDATA}: run --measure and update them", file=sys.stderr)
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "lib")
    cls = ranges(cat_class)
    ccc = ranges(lambda cp: ud.combining(chr(cp)) and not in_ranges(cp, HF_NFC_CCC0) and
                 ud.combining(chr(cp)))
    unknown = {c for _, _, c in HF_NFC_NO_COMPOSE}
    dec, flat, comp = [], [], []
    for cp in range(MAXCP):
        if HANGUL_S0 <= cp < HANGUL_S0 + HANGUL_SN or cp in unknown:
            continue
        ch = chr(cp)
        d = ud.normalize("NFD", ch)
        if d != ch:
            assert not any(in_ranges(ord(x), HF_NFC_CCC0) for x in d), hex(cp)
            dec.append((cp, len(flat), len(d)))
            flat.extend(ord(x) for x in d)
        m = ud.decomposition(ch)
        if m and not m.startswith("<"):
            parts = [int(x, 16) for x in m.split()]
            if len(parts) == 2 and ud.normalize("NFC", chr(parts[0]) + chr(parts[1])) == ch:
                comp.append((parts[0], parts[1], cp))
    comp.sort()
    ver = ud.unidata_version

    def rows(items, fmt, per):
        lines = []
        for i in range(0, len(items), per):
            lines.append("  " + " ".join(fmt(x) for x in items[i:i + per]))
        return "\n".join(lines)

    h = f"""/* unicode_data.h - Unicode tables for the text tokenizer (Unicode {ver}).
 * GENERATED by tools/gen_unicode.py from Python's unicodedata; do not edit. See that script for
 * what each table holds. All tables are sorted by their first field (binary search). */
#ifndef COSY_UNICODE_DATA_H
#define COSY_UNICODE_DATA_H

#include <stdint.h>

#define COSY_UNICODE_VERSION "{ver}"

typedef struct cosy_uc_range {{ uint32_t lo, hi, v; }} cosy_uc_range;
typedef struct cosy_uc_dec {{ uint32_t cp; uint16_t off, len; }} cosy_uc_dec;
typedef struct cosy_uc_pair {{ uint32_t a, b, c; }} cosy_uc_pair;

/* general category: v = 1 letter (L*), 2 number (N*); other code points are absent */
extern const cosy_uc_range cosy_uc_class[];
extern const int cosy_uc_n_class;
/* canonical combining class v (non-zero only) */
extern const cosy_uc_range cosy_uc_ccc[];
extern const int cosy_uc_n_ccc;
/* full canonical decomposition of cp: cosy_uc_decomp_cps[off .. off+len) (no Hangul syllables) */
extern const cosy_uc_dec cosy_uc_decomp[];
extern const int cosy_uc_n_decomp;
extern const uint32_t cosy_uc_decomp_cps[];
/* primary composites: a + b -> c, sorted by (a, b) (no Hangul) */
extern const cosy_uc_pair cosy_uc_comp[];
extern const int cosy_uc_n_comp;

#endif
"""
    c = f"""/* unicode_data.c - Unicode {ver} tables for the text tokenizer.
 * GENERATED by tools/gen_unicode.py from Python's unicodedata; do not edit. */
#include "unicode_data.h"

const cosy_uc_range cosy_uc_class[] = {{
{rows(cls, lambda r: "{0x%X,0x%X,%d}," % tuple(r), 5)}
}};
const int cosy_uc_n_class = {len(cls)};

const cosy_uc_range cosy_uc_ccc[] = {{
{rows(ccc, lambda r: "{0x%X,0x%X,%d}," % tuple(r), 5)}
}};
const int cosy_uc_n_ccc = {len(ccc)};

const cosy_uc_dec cosy_uc_decomp[] = {{
{rows(dec, lambda r: "{0x%X,%d,%d}," % r, 6)}
}};
const int cosy_uc_n_decomp = {len(dec)};

const uint32_t cosy_uc_decomp_cps[] = {{
{rows(flat, lambda x: "0x%X," % x, 10)}
}};

const cosy_uc_pair cosy_uc_comp[] = {{
{rows(comp, lambda r: "{0x%X,0x%X,0x%X}," % r, 4)}
}};
const int cosy_uc_n_comp = {len(comp)};
"""
    assert len(flat) < 65536
    with open(os.path.join(outdir, "unicode_data.h"), "w", encoding="ascii") as fh:
        fh.write(h)
    with open(os.path.join(outdir, "unicode_data.c"), "w", encoding="ascii") as fh:
        fh.write(c)
    print(f"unicode {ver}: {len(cls)} class ranges, {len(ccc)} ccc ranges, {len(dec)} "
          f"decompositions ({len(flat)} cps), {len(comp)} compositions")


if __name__ == "__main__":
    main()
