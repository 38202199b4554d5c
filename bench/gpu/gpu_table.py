"""gpu_table.py: one Markdown table from the JSON lines of bench_attention_gpu
and bench_sdpa.py (any number of files).

    python3 bench/gpu/gpu_table.py OUT/bench_attnlab.jsonl OUT/bench_sdpa.jsonl

Each cell is the median time in ms and, in brackets, TFLOP/s by the shared
convention (causal forward = 2 B H S^2 d; backward = 2.5x forward).
"vs sdpa fp32" = torch fp32 time / our flash time (> 1: ours is faster).
"""
import json
import sys

COLUMNS = [  # (title, framework, impl, dtype)
    ("attnlab flash fp32", "attnlab", "flash", "float32"),
    ("attnlab dense fp32", "attnlab", "dense", "float32"),
    ("torch sdpa fp32", "torch", "sdpa", "float32"),
    ("torch sdpa bf16", "torch", "sdpa", "bfloat16"),
    ("attnlab CPU op fp32", "attnlab", "cpu", "float32"),
]


def main(paths):
    cells, notes, shapes, devices = {}, [], [], set()
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                row = json.loads(line)
                if "skipped" in row or "check" in row or "peak_device_bytes" in row:
                    notes.append(row)
                    continue
                if "pass" not in row:
                    continue
                shape = (row["B"], row["H"], row["S"], row["d"])
                if shape not in shapes:
                    shapes.append(shape)
                if row.get("device") and row["device"] != "cpu":
                    devices.add(row["device"])
                cells[(shape, row["pass"], row["framework"], row["impl"], row["dtype"])] = row
    print(f"GPU: {', '.join(sorted(devices)) or 'unknown'}; causal; median of the timed repetitions\n")
    header = ["(B, H, S, d)", "pass"] + [c[0] for c in COLUMNS] + ["vs sdpa fp32"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for shape in shapes:
        for pass_name in ("fwd", "fwd+bwd"):
            row = [str(shape), pass_name]
            for _, framework, impl, dtype in COLUMNS:
                cell = cells.get((shape, pass_name, framework, impl, dtype))
                row.append(f"{cell['ms']:.2f} ({cell['tflops']:.1f})" if cell else "-")
            ours = cells.get((shape, pass_name, "attnlab", "flash", "float32"))
            torch = cells.get((shape, pass_name, "torch", "sdpa", "float32"))
            row.append(f"{torch['ms'] / ours['ms']:.2f}" if ours and torch else "-")
            print("| " + " | ".join(row) + " |")
    for note in notes:
        print(f"\n{json.dumps(note)}", end="")
    print()
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
