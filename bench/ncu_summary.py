#!/usr/bin/env python3
"""Summarize an `ncu --csv --metrics gpu__time_duration.sum` log: per kernel name, the number of
launches, the mean and total device time, sorted by total (the share of a decode step)."""
import csv
import io
import sys
from collections import defaultdict


def main(path):
    text = open(path, errors="replace").read()
    start = text.find('"ID","Process ID"')
    if start < 0:
        print("no ncu CSV in", path)
        return 1
    rows = csv.DictReader(io.StringIO(text[start:]))
    tot = defaultdict(float)
    cnt = defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"].replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
        short = name.replace("void ", "").split("(")[0].strip()[:70]
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = v / 1000.0 if unit.startswith("n") else v if unit.startswith("u") else v * 1000.0
        tot[short] += us
        cnt[short] += 1
    allt = sum(tot.values())
    print(f"{'kernel':70s} {'n':>5s} {'mean us':>9s} {'total us':>10s} {'share':>6s}")
    for k in sorted(tot, key=lambda k: -tot[k]):
        print(f"{k[:70]:70s} {cnt[k]:5d} {tot[k] / cnt[k]:9.2f} {tot[k]:10.1f} {100 * tot[k] / allt:5.1f}%")
    print(f"{'all':70s} {sum(cnt.values()):5d} {'':9s} {allt:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
