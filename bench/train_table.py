"""train_table.py: the table of bench/run_train.sh's JSON lines.

    /usr/bin/python3 bench/train_table.py build/bench/train_results.jsonl

Per workload: the median step time of each setting (the median over rounds of
each process's median), attnlab against PyTorch at one thread and at two cores
(PyTorch's best of its three two-core settings), the ratio torch/attnlab (above
1: attnlab is faster), GFLOP/s of the step beside the sgemm probe of the same
processes and as a share of the cores' FMA peak (bench/fma_peak.h: one core's
peak times the threads), and peak resident memory (PyTorch's: of the setting
quoted). The header names the CPU, attnlab's instruction set (ATTNLAB_ISA) and
OpenBLAS's core (and any OPENBLAS_CORETYPE PyTorch ran under).
"""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    results = defaultdict(lambda: defaultdict(list))  # (workload, shape) -> label -> [result]
    probes = defaultdict(list)  # threads -> attnlab's OpenBLAS sgemm GFLOP/s
    peaks, machine, forced = [], set(), set()  # one core's FMA peak; (cpu, isa, OpenBLAS core); torch's OPENBLAS_CORETYPE
    order = []
    for line in open(path):
        r = json.loads(line)
        if r.get("meta") and r["framework"] == "attnlab" and "isa" in r:
            machine.add((r["cpu"], r["isa"], r["openblas_corename"]))
            if r["fma_peak_gflops_one_core"] > 0:
                peaks.append(r["fma_peak_gflops_one_core"])
        if r.get("meta") and r["framework"] == "torch":
            forced.add(r.get("openblas_coretype") or "none")
        if "probe" in r and r["framework"] == "attnlab":
            probes[r["threads"]].append(r["gflops"])
        if "workload" not in r:
            continue
        key = (r["workload"], r["shape"])
        if key not in results:
            order.append(key)
        results[key][r["label"]].append(r)

    def median_time(rs):
        return statistics.median(r["median_s"] for r in rs)

    def peak(rs):
        return max(r["peak_rss_mib"] for r in rs)

    sgemm = {t: statistics.median(v) for t, v in probes.items()}
    peak_one_core = statistics.median(peaks) if peaks else None
    for cpu, isa, core in sorted(machine):
        print(f"CPU: {cpu}; attnlab's kernels: {isa}; OpenBLAS core: {core}; "
              f"PyTorch's OPENBLAS_CORETYPE: {', '.join(sorted(forced)) or '-'}")
    if peak_one_core:
        print(f"FMA peak (bench/fma_peak.h, one core, median over attnlab's processes): {peak_one_core:.1f} GFLOP/s")
    print("sgemm probe (plain OpenBLAS, 1024^3, median over attnlab's processes): " +
          ", ".join(f"{t} thread(s) {g:.1f} GFLOP/s" for t, g in sorted(sgemm.items())))
    print()
    print("| workload | shape | threads | attnlab ms | torch ms (setting) | torch/attnlab | attnlab GFLOP/s | % of sgemm "
          "| % of FMA peak | attnlab MiB | torch MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    memory_rows = []
    for key in order:
        by_label = results[key]
        if key[0].startswith("attention_"):
            memory_rows.append((key, by_label))
            continue
        for threads, ours, candidates in ((1, "attnlab-1t", ["torch-1t"]),
                                          (2, "attnlab-2t", ["torch-2t-a", "torch-2t-b", "torch-2t-c"])):
            if ours not in by_label:
                continue
            present = [c for c in candidates if c in by_label]
            best = min(present, key=lambda c: median_time(by_label[c]))
            a, t = median_time(by_label[ours]), median_time(by_label[best])
            gflops = statistics.median(r["gflops"] for r in by_label[ours])
            pct = f"{100 * gflops / sgemm[threads]:.0f}%" if threads in sgemm else "-"
            of_peak = f"{100 * gflops / (peak_one_core * threads):.0f}%" if peak_one_core else "-"
            torch_peak = peak(by_label[best])  # the setting whose time is quoted
            print(f"| {key[0]} | {key[1]} | {threads} | {1e3 * a:.3f} | {1e3 * t:.3f} ({best}) | {t / a:.2f} "
                  f"| {gflops:.1f} | {pct} | {of_peak} | {peak(by_label[ours]):.0f} | {torch_peak:.0f} |")
    if memory_rows:
        print()
        print("| attention op, forward+backward | shape | step s | peak MiB |")
        print("|---|---|---|---|")
        for key, by_label in memory_rows:
            for label, rs in by_label.items():
                print(f"| {key[0]} | {key[1]} | {median_time(rs):.2f} | {peak(rs):.0f} |")


if __name__ == "__main__":
    main(sys.argv[1])
