"""train_gpu_table.py: training steps/s of the toy decoders on a GPU machine,
from the JSON lines gpu_check.sh collects (bench_train and bench_train.py).

    python3 bench/gpu/train_gpu_table.py OUT/train_gpu.jsonl

Columns: attnlab with train.device = "cuda" (attention core on the GPU, the
rest on the CPU cores), attnlab's CPU path on every core, PyTorch eager on the
GPU; the ratios are steps/s of attnlab-cuda over the other two (> 1: faster).
"""
import json
import sys

LABELS = ["attnlab-cuda", "attnlab-cpu", "torch-cuda"]


def main(path):
    rows, order = {}, []
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "workload" not in r or r.get("label") not in LABELS:
            continue
        key = (r["workload"], r["shape"])
        if key not in rows:
            rows[key] = {}
            order.append(key)
        rows[key][r["label"]] = r["steps_per_s"]
    print("| workload | shape | attnlab cuda steps/s | attnlab cpu steps/s | torch cuda steps/s "
          "| cuda / cpu | cuda / torch cuda |")
    print("|---|---|---|---|---|---|---|")
    for key in order:
        got = rows[key]
        cells = [f"{got[label]:.1f}" if label in got else "-" for label in LABELS]
        ratio = lambda other: f"{got['attnlab-cuda'] / got[other]:.2f}" if "attnlab-cuda" in got and other in got else "-"
        print(f"| {key[0]} | {key[1]} | {' | '.join(cells)} | {ratio('attnlab-cpu')} | {ratio('torch-cuda')} |")


if __name__ == "__main__":
    main(sys.argv[1])
