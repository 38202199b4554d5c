"""ops_table.py: one Markdown table from the JSON lines of bench_ops and bench_ops.py.

    /usr/bin/python3 bench/ops_table.py results.jsonl

Repetition times of every round of a (framework, workload, shape, threads) are
pooled and their median reported. ratio = torch time / attnlab time (> 1: attnlab
is faster). "plain sgemm" is the loop of cblas_sgemm calls computing the same
product on preallocated buffers (SGEMM_REFERENCE below), timed interleaved with
our matmul in the same bench_ops runs; "% sgemm" = plain time / our time (the
issue asks >= 90%; below is in bold).
A "~" marks a row whose per-round medians differ by more than 10% (noisy).
The probe lines give the GEMM speed each process saw at its start and end.
"""
import json
import statistics
import sys
from collections import defaultdict

# Our matmul workload -> the plain sgemm loop computing the same product.
SGEMM_REFERENCE = {
    "scores_fwd": "sgemm_scores_nt_fwd",     # Q K^T, K transposed by the sgemm flag (no copy)
    "scores_mm_fwd": "sgemm_scores_fwd",     # Q @ K^T given contiguous
    "context_fwd": "sgemm_context_fwd",
    "scores_fwdbwd": "sgemm_scores_fwdbwd",
    "scores_mm_fwdbwd": "sgemm_scores_fwdbwd",
    "context_fwdbwd": "sgemm_context_fwdbwd",
}
ORDER = ["scores_fwd", "scores_mm_fwd", "context_fwd", "scores_fwdbwd", "scores_mm_fwdbwd", "context_fwdbwd",
         "softmax_fwd", "softmax_fwdbwd"]


def main():
    times = defaultdict(list)         # (framework, workload, seq, head, threads) -> pooled times
    round_medians = defaultdict(list)
    meta = {}
    probes = defaultdict(list)        # (framework, threads) -> 1024^3 sgemm GFLOP/s, start and end of each process
    with open(sys.argv[1]) as f:
        for line in f:
            row = json.loads(line)
            if row.get("meta"):
                meta[row["framework"]] = row
            if row.get("probe"):
                probes[(row["framework"], row["threads"])].append(row["gflops"])
            if "workload" not in row:
                continue
            key = (row["framework"], row["workload"], row["seq"], row["head"], row["threads"])
            times[key] += row["times_s"]
            round_medians[key].append(row["median_s"])

    def median(framework, workload, seq, head, threads):
        t = times.get((framework, workload, seq, head, threads))
        return statistics.median(t) if t else None

    def noisy(key):
        m = round_medians.get(key, [])
        return len(m) > 1 and max(m) > 1.1 * min(m)

    for framework, row in sorted(meta.items()):
        extra = f", torch {row['torch_version']}" if "torch_version" in row else ""
        print(f"- {framework}: OpenBLAS core {row['openblas_corename']}{extra}")
    print()
    for threads in sorted({t for _, t in probes}):
        line = []
        for framework in ("attnlab", "torch"):
            values = probes.get((framework, threads), [])
            if values:
                line.append(f"{framework} " + " ".join(f"{v:.0f}" for v in values))
        ours, theirs = (statistics.median(probes[(f, threads)]) if probes.get((f, threads)) else None
                        for f in ("attnlab", "torch"))
        warn = ""
        if ours and theirs and max(ours, theirs) > 1.1 * min(ours, theirs):
            warn = "  <- the two ran at different machine speeds: their ratios at this thread count are not reliable"
        print(f"- probe, {threads} thread(s), 1024^3 sgemm GFLOP/s at start/end of each process: "
              f"{'; '.join(line)}{warn}")
    print()
    print("| workload | S | d | threads | attnlab ms | torch ms | ratio torch/attnlab | plain sgemm ms | % sgemm |")
    print("|---|---|---|---|---|---|---|---|---|")
    shapes = sorted({(k[2], k[3]) for k in times})
    for threads in sorted({k[4] for k in times}):
        for seq, head in shapes:
            for workload in ORDER:
                ours = median("attnlab", workload, seq, head, threads)
                theirs = median("torch", workload, seq, head, threads)
                if ours is None and theirs is None:
                    continue
                def mark_of(fw, name):
                    return "~" if noisy((fw, name, seq, head, threads)) else ""
                ours_ms = f"{ours * 1e3:.3f}{mark_of('attnlab', workload)}" if ours else "-"
                theirs_ms = f"{theirs * 1e3:.3f}{mark_of('torch', workload)}" if theirs else "-"
                ratio = f"{theirs / ours:.2f}" if ours and theirs else "-"
                reference = SGEMM_REFERENCE.get(workload, "")
                plain = median("attnlab", reference, seq, head, threads)
                plain_ms = f"{plain * 1e3:.3f}{mark_of('attnlab', reference)}" if plain else "-"
                pct = f"{100 * plain / ours:.0f}%" if plain and ours else "-"
                if pct != "-" and plain / ours < 0.9:
                    pct = f"**{pct}**"
                print(f"| {workload} | {seq} | {head} | {threads} | {ours_ms} | {theirs_ms} | {ratio} | {plain_ms} | {pct} |")


if __name__ == "__main__":
    main()
