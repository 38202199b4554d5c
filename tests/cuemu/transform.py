#!/usr/bin/env python3
"""Turns a cuda/*.cu file into host C++ for cuemu (tests/cuemu/README.md).

Only two CUDA-only constructs need rewriting; everything else compiles as it
stands against tests/cuemu/include/:

  kernel<<<grid, block[, shared[, stream]]>>>(args...)
      -> cuemu::launch("kernel", kernel, cuemu::config(grid, block, ...), args...)
  extern __shared__ float shared[];
      -> float* shared = reinterpret_cast<float*>(cuemu::dynamic_shared());

A #line directive keeps compiler, ASan and UBSan messages pointing at the .cu.

Mutants (--mutant NAME) are the same sources with one deliberate bug each, to
prove that the emulated suite fails when a kernel is wrong. Each edit must
match the source exactly once, so a change to a kernel that moves the mutated
line breaks the build of the mutants instead of silently testing nothing.

usage:
  transform.py SOURCE.cu OUT.cpp                     the real kernel
  transform.py --mutant NAME CUDA_DIR OUT_DIR        the files of one mutant
  transform.py --list-mutants                        "NAME SOURCE.cu" lines
"""
import pathlib
import re
import sys

# name: (file in cuda/ to edit, the exact text, its replacement, the .cu files to rebuild)
MUTANTS = {
    # the loop-top barrier of the flash forward: the next K/V tile overwrites the
    # one other threads still multiply with
    "missing_barrier": (
        "attention_flash.cu",
        "        __syncthreads();  // the previous step has finished reading Ks, Vs, Ps\n",
        "",
        ["attention_flash.cu"],
    ),
    # the dense forward's context = A V reads V with the row stride of the weights
    "wrong_leading_dimension": (
        "attention_dense.cu",
        "{v_live, d_v, st.kv_v}",
        "{v_live, Tk, st.kv_v}",
        ["attention_dense.cu"],
    ),
    # tile loads read one row past the matrix
    "out_of_bounds_load": (
        "tile.cuh",
        "row < rows && c < width",
        "row <= rows && c < width",
        ["attention_flash.cu"],
    ),
}

LAUNCH = re.compile(r"([A-Za-z_]\w*(?:<[\w\s,]*>)?)<<<(.*?)>>>\((\s*\))?", re.S)
SHARED = re.compile(r"extern __shared__ (\w+) (\w+)\[\];")


def transform(text: str, name: str) -> str:
    def launch(m: re.Match) -> str:
        kernel, config, no_args = m.group(1), m.group(2), m.group(3)
        head = f'cuemu::launch("{kernel}", {kernel}, cuemu::config({config})'
        return head + ")" if no_args else head + ", "

    out = LAUNCH.sub(launch, text)
    out = SHARED.sub(r"\1* \2 = reinterpret_cast<\1*>(cuemu::dynamic_shared());", out)
    if "<<<" in out or "extern __shared__" in out:
        sys.exit(f"transform.py: {name}: a launch or shared declaration left untransformed")
    return f'#include "cuemu.h"\n#line 1 "cuda/{name}"\n' + out


def edit_once(text: str, old: str, new: str, where: str) -> str:
    count = text.count(old)
    if count != 1:
        sys.exit(f"transform.py: mutant text found {count} times in {where} (expected once): {old!r}")
    return text.replace(old, new)


def write_mutant(name: str, cuda_dir: pathlib.Path, out_dir: pathlib.Path) -> None:
    edited, old, new, rebuilt = MUTANTS[name]
    source = (cuda_dir / edited).read_text()
    mutated = edit_once(source, old, new, edited)
    out_dir.mkdir(parents=True, exist_ok=True)
    if edited.endswith(".cuh"):
        # `#include "cuda/x.cuh"` looks next to the including file first: the
        # mutated header beside the generated sources wins over the real one.
        (out_dir / "cuda").mkdir(exist_ok=True)
        (out_dir / "cuda" / edited).write_text(mutated)
    for cu in rebuilt:
        text = mutated if cu == edited else (cuda_dir / cu).read_text()
        (out_dir / (pathlib.Path(cu).stem + ".cpp")).write_text(transform(text, cu))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--list-mutants"]:
        for name, (_, _, _, rebuilt) in MUTANTS.items():
            print(name, *rebuilt)
    elif argv[:1] == ["--mutant"] and len(argv) == 4:
        if argv[1] not in MUTANTS:
            sys.exit(f"transform.py: no mutant {argv[1]!r} (have: {', '.join(MUTANTS)})")
        write_mutant(argv[1], pathlib.Path(argv[2]), pathlib.Path(argv[3]))
    elif len(argv) == 2:
        source, out = pathlib.Path(argv[0]), pathlib.Path(argv[1])
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(transform(source.read_text(), source.name))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
