"""callgrind_diff.py: instructions per step and per function from two callgrind runs.

    /usr/bin/python3 bench/callgrind_diff.py A.callgrind B.callgrind STEPS

B ran STEPS more training steps than A; each function's self count in B minus A,
over STEPS, is its cost per steady-state step (start-up and warm-up cancel).
Prints a markdown table of the functions above 0.5% of a step, largest first.
Code without a symbol (bare addresses: libxsmm's JIT-compiled GEMM kernels)
counts as one row, "JIT-compiled code (libxsmm kernels)".
"""
import re
import subprocess
import sys

JIT = "JIT-compiled code (libxsmm kernels)"


def self_costs(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    costs, total = {}, 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)", line)
        if not m:
            continue
        count, name = int(m.group(1).replace(",", "")), m.group(2).strip()
        if re.fullmatch(r"(\?\?\?:)?0x[0-9a-f]+( \[.*\])?", name):
            name = JIT
        if "PROGRAM TOTALS" in name:
            total = count
        else:
            costs[name] = costs.get(name, 0) + count
    return costs, total


def short(name):
    """'file:function [object]' -> the function, templates and arguments elided; a
    std::function's call names the attnlab function its lambda is in."""
    if name == JIT:
        return name
    name = re.sub(r"^\S*?:(?=[^/])", "", name, count=1)  # the source file
    name = re.sub(r" \[.*\]$", "", name)  # the object
    if name.startswith("std::_Function_handler"):
        found = re.findall(r"attnlab::(\w[\w:]*(?:\(anonymous namespace\)::\w+)?)[<(]", name)
        found = [f for f in found if f != "record"]  # record<T, op>: the op's backward closure
        return f"lambda in attnlab::{found[0]} (std::function)" if found else "std::function call"
    depth, kept = 0, []
    for ch in name:  # drop what is inside <...> and (...)
        if ch in "<(":
            depth += 1
            if depth == 1:
                kept.append("<>" if ch == "<" else "()")
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            kept.append(ch)
    return "".join(kept)[:110]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.splitlines()[2].strip())
    a, total_a = self_costs(sys.argv[1])
    b, total_b = self_costs(sys.argv[2])
    steps = int(sys.argv[3])
    per_step = (total_b - total_a) / steps
    print(f"{per_step / 1e6:.2f} M instructions per step\n")
    print("| function (self) | M instructions per step | share |")
    print("|---|---|---|")
    rows = sorted((((b.get(k, 0) - a.get(k, 0)) / steps, k) for k in set(a) | set(b)), reverse=True)
    for cost, name in rows:
        if cost < 0.005 * per_step:
            break
        print(f"| `{short(name)}` | {cost / 1e6:.3f} | {100 * cost / per_step:.1f}% |")


if __name__ == "__main__":
    main()
