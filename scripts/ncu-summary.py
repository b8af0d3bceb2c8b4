#!/usr/bin/env python3
"""Sums Nsight Compute's per-kernel summary (gpu-check.sh profile: ncu --metrics
gpu__time_duration.sum --print-summary per-kernel) into one line per kernel, largest total first.

    scripts/ncu-summary.py PROFILE_LOG [TOP]

Each line: the kernel (templates kept, arguments dropped), invocations, mean and total time, grid.
The first line is the total over every kernel, to set against the run's step time (is the GPU the
limit, or the host?)."""
import re
import sys

UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def main():
    lines = open(sys.argv[1]).read().split("\n")
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    rows, current = [], None
    for line in lines:
        if ", Device " in line and "Invocations" in line:
            head = line.split(", Device ")[0].strip()
            match = re.match(r"(.*) \(([\d, ]+)\)x\(([\d, ]+)\)$", head)
            name, grid = (match.group(1), match.group(2)) if match else (head, "?")
            name = re.sub(r"^void ", "", name).split("(")[0]
            current = (name, int(line.split()[-1]), grid)
        elif "gpu__time_duration.sum" in line and current:
            fields = line.split()
            mean_us = float(fields[-1].replace(",", "")) * UNITS[fields[1]]
            name, count, grid = current
            rows.append((name[-70:], count, mean_us, mean_us * count, grid))
            current = None
    rows.sort(key=lambda r: -r[3])
    print("total kernel ms: %.1f over %d kernels" % (sum(r[3] for r in rows) / 1e3,
                                                     sum(r[1] for r in rows)))
    for name, count, mean_us, total_us, grid in rows[:top]:
        print(f"{name:70s} n={count:5d} mean={mean_us:9.1f}us total={total_us / 1e3:8.2f}ms grid={grid}")


if __name__ == "__main__":
    main()
