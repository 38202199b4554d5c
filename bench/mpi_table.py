"""mpi_table.py: the table of bench/run_mpi.sh's JSON lines (medians over rounds).

    /usr/bin/python3 bench/mpi_table.py build/bench/mpi_results.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    rates, sweeps = defaultdict(list), {}
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if "steps_per_s" in d:
                rates[(d["size"], d["setting"])].append(d["steps_per_s"])
            else:
                sweeps[d["setting"]] = d
    print("| workload | setting | steps/s (median) | runs | vs attnlab 1 process, 2 threads | scaling efficiency |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size in ("medium", "large"):
        med = {s: statistics.median(v) for (z, s), v in rates.items() if z == size}
        if not med:
            continue
        base2, base1 = med.get("attnlab-1p-2t"), med.get("attnlab-1p-1t")
        torch1 = med.get("torch-1p-1t")
        for setting in sorted(med):
            r = med[setting]
            vs = f"{r / base2:.2f}" if base2 else "-"
            eff = "-"
            if "np2" in setting:  # against two single-thread processes' worth of steps
                one = torch1 if setting.startswith("torch") else base1
                eff = f"{r / one:.2f}x of 1 rank = {100 * r / (2 * one) / 1:.0f}% of linear" if one else "-"
            print(f"| {size} | {setting} | {r:.3f} | {len(rates[(size, setting)])} | {vs} | {eff} |")
    for setting, d in sorted(sweeps.items()):
        print(f"\n{setting}: {d['wall_s']:.1f} s, {d['cells_ok']} cells ok")


if __name__ == "__main__":
    main(sys.argv[1])
