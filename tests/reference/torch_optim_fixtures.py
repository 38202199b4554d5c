#!/usr/bin/env python3
"""Writes the PyTorch reference results that tests/optim/test_optim.cpp compares
attnlab's optimisers (optim/optimizer.h) against.

    /usr/bin/python3 tests/reference/torch_optim_fixtures.py OUT.h5

CTest runs this as the fixture `torch_optim_fixtures` before the Optim* tests
(tests/CMakeLists.txt) and hands them the file through ATTNLAB_OPTIM_FIXTURES.

Two parameters, "weight" (3,4) and "bias" (4,), and a fixed sequence of 5
gradients for each. Every optimiser configuration starts from the same initial
values; each step sets p.grad to the stored gradient and calls torch.optim's
step(); the parameters after every step are stored. Each configuration runs
twice, in float32 and in float64, from the same values (all inputs are float32
numbers, so the float64 run starts from exactly the same point).

AdamW: torch.optim.AdamW decays every parameter of a group, while attnlab's
make_adamw decays only parameters with >= 2 axes (matrices), never vectors
(biases, LayerNorm weights). To compare the same rule, the vector "bias" goes
into a second param group with weight_decay=0.

clip: torch.nn.utils.clip_grad_norm_ (L2, max_norm) on the two gradients, one
case with a total norm above max_norm (gradients scaled) and one below (left
as they are). Stores the returned total norm and the gradients afterwards.

schedules: torch has no scheduler with the same semantics as attnlab's
scheduled_lr, so the values are computed here from the formulas documented in
optim/optimizer.h, in float64, independently of the C++:
    step < warmup:            lr (step + 1) / warmup          (linear warm-up from 0)
    then, with p = min(1, (step - warmup) / (total - warmup)):
      constant                lr
      linear                  m + (lr - m) (1 - p)             (m at step = total)
      cosine                  m + (lr - m) (1 + cos(pi p)) / 2 (m at step = total)
    with m = min_lr (optim.min_lr, 0 by default).

File layout:

  /                      attrs: format, format_version, torch_version, seed, steps
  /initial/{weight,bias}                     (3,4), (4,) float32
  /grads/{weight,bias}                       (5,3,4), (5,4) float32: the gradient of each step
  /optimizers/<config>   attrs: optimizer ("SGD" | "Adam" | "AdamW"), lr, momentum,
                                nesterov (0/1), weight_decay, beta1, beta2, eps
                                (attnlab's arguments; AdamW's are make_adamw's)
    <dtype>/{weight,bias}                    (5,3,4), (5,4): parameters after steps 1..5,
                                             dtype float32 | float64, stored in that dtype
  /clip/<case>           attrs: max_norm
    grads/{weight,bias}                      float32, before clipping
    <dtype>/total_norm                       () the norm torch returned (its dtype)
    <dtype>/{weight,bias}                    the gradients after clip_grad_norm_
  /schedules/<case>      attrs: schedule ("constant" | "linear" | "cosine"), base_lr,
                                warmup, total, min_lr
    step (N,) int64, lr (N,) float64
"""

import math
import sys

import h5py
import numpy as np
import torch

FORMAT = "attnlab-torch-optim-fixtures"
FORMAT_VERSION = 1
SEED = 20240612
STEPS = 5
DTYPES = {"float32": torch.float32, "float64": torch.float64}

# (name, attnlab's arguments). Defaults as torch's and attnlab's: momentum 0,
# betas (0.9, 0.999), eps 1e-8; make_adamw's weight_decay is given explicitly.
OPTIMIZERS = [
    ("sgd", dict(optimizer="SGD", lr=0.1)),
    ("sgd_momentum", dict(optimizer="SGD", lr=0.1, momentum=0.9)),
    ("sgd_nesterov_decay", dict(optimizer="SGD", lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("adam", dict(optimizer="Adam", lr=1e-2)),
    ("adam_decay", dict(optimizer="Adam", lr=1e-2, weight_decay=0.1)),
    ("adamw", dict(optimizer="AdamW", lr=1e-2, weight_decay=0.1)),
]
DEFAULTS = dict(momentum=0.0, nesterov=False, weight_decay=0.0, beta1=0.9, beta2=0.999, eps=1e-8)

# (name, max_norm, scale of the gradients): the gradients are standard normal
# times `scale` (total norm about 3.5 * scale over the 16 entries)
CLIP_CASES = [
    ("above", 1.0, 1.0),
    ("below", 5.0, 0.5),
]

# (name, schedule, base_lr, warmup, total); steps 0 .. total + 2 (past the end too)
SCHEDULE_CASES = [
    ("constant_no_warmup", "constant", 0.1, 0, 6),
    ("constant_warmup", "constant", 0.1, 3, 8),
    ("linear_no_warmup", "linear", 0.1, 0, 8),
    ("linear_warmup", "linear", 0.1, 3, 10),
    ("cosine_no_warmup", "cosine", 0.1, 0, 8),
    ("cosine_warmup", "cosine", 0.1, 4, 11),
    ("linear_floor", "linear", 0.1, 2, 9, 0.02),   # optim.min_lr
    ("cosine_floor", "cosine", 0.1, 3, 12, 0.01),
]


def torch_optimizer(cfg, weight, bias):
    """torch.optim with attnlab's configuration `cfg` over the two leaves."""
    c = {**DEFAULTS, **cfg}
    if c["optimizer"] == "SGD":
        return torch.optim.SGD([weight, bias], lr=c["lr"], momentum=c["momentum"], nesterov=c["nesterov"],
                               weight_decay=c["weight_decay"])
    betas = (c["beta1"], c["beta2"])
    if c["optimizer"] == "Adam":
        return torch.optim.Adam([weight, bias], lr=c["lr"], betas=betas, eps=c["eps"],
                                weight_decay=c["weight_decay"])
    # AdamW: torch decays every parameter of a group; attnlab's make_adamw never
    # decays vectors, so the bias goes in its own group with weight_decay 0.
    return torch.optim.AdamW([{"params": [weight]}, {"params": [bias], "weight_decay": 0.0}],
                             lr=c["lr"], betas=betas, eps=c["eps"], weight_decay=c["weight_decay"])


def run_optimizer(cfg, initial, grads, dtype):
    """Parameters after each of the STEPS steps: {"weight": (STEPS,3,4), "bias": (STEPS,4)}."""
    weight = torch.tensor(initial["weight"], dtype=dtype, requires_grad=True)
    bias = torch.tensor(initial["bias"], dtype=dtype, requires_grad=True)
    opt = torch_optimizer(cfg, weight, bias)
    trajectory = {"weight": [], "bias": []}
    for step in range(STEPS):
        weight.grad = torch.tensor(grads["weight"][step], dtype=dtype)
        bias.grad = torch.tensor(grads["bias"][step], dtype=dtype)
        opt.step()
        trajectory["weight"].append(weight.detach().clone().numpy())
        trajectory["bias"].append(bias.detach().clone().numpy())
    return {name: np.stack(values) for name, values in trajectory.items()}


def run_clip(grads, max_norm, dtype):
    """torch.nn.utils.clip_grad_norm_ on the two gradients: (total_norm, clipped grads)."""
    leaves = {name: torch.zeros(g.shape, dtype=dtype, requires_grad=True) for name, g in grads.items()}
    for name, leaf in leaves.items():
        leaf.grad = torch.tensor(grads[name], dtype=dtype)
    total = torch.nn.utils.clip_grad_norm_(list(leaves.values()), max_norm)
    return total.detach().numpy(), {name: leaf.grad.numpy() for name, leaf in leaves.items()}


def scheduled_lr(base_lr, schedule, step, warmup, total, min_lr=0.0):
    """optim/optimizer.h's documented schedule (see the module docstring)."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    if schedule == "constant":
        return base_lr
    progress = min(1.0, (step - warmup) / (total - warmup))
    if schedule == "linear":
        return min_lr + (base_lr - min_lr) * (1.0 - progress)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def generate(path):
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    f32 = np.float32
    initial = {"weight": rng.standard_normal((3, 4)).astype(f32), "bias": rng.standard_normal(4).astype(f32)}
    grads = {"weight": rng.standard_normal((STEPS, 3, 4)).astype(f32),
             "bias": rng.standard_normal((STEPS, 4)).astype(f32)}
    with h5py.File(path, "w") as f:
        f.attrs["format"] = np.bytes_(FORMAT)
        f.attrs["format_version"] = FORMAT_VERSION
        f.attrs["torch_version"] = np.bytes_(torch.__version__)
        f.attrs["seed"] = SEED
        f.attrs["steps"] = STEPS
        for name in ("weight", "bias"):
            f[f"initial/{name}"] = initial[name]
            f[f"grads/{name}"] = grads[name]

        for name, cfg in OPTIMIZERS:
            grp = f.create_group(f"optimizers/{name}")
            for key, value in {**DEFAULTS, **cfg}.items():
                grp.attrs[key] = np.bytes_(value) if isinstance(value, str) else (
                    int(value) if isinstance(value, bool) else np.float64(value))
            for dtype_name, dtype in DTYPES.items():
                for pname, values in run_optimizer(cfg, initial, grads, dtype).items():
                    grp[f"{dtype_name}/{pname}"] = values
            print(f"optimizers/{name}: {STEPS} steps in float32 and float64")

        for name, max_norm, scale in CLIP_CASES:
            grp = f.create_group(f"clip/{name}")
            grp.attrs["max_norm"] = np.float64(max_norm)
            clip_grads = {"weight": (scale * rng.standard_normal((3, 4))).astype(f32),
                          "bias": (scale * rng.standard_normal(4)).astype(f32)}
            for pname, g in clip_grads.items():
                grp[f"grads/{pname}"] = g
            for dtype_name, dtype in DTYPES.items():
                total, clipped = run_clip(clip_grads, max_norm, dtype)
                grp[f"{dtype_name}/total_norm"] = total
                for pname, g in clipped.items():
                    grp[f"{dtype_name}/{pname}"] = g
            norm = float(np.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in clip_grads.values())))
            assert (norm > max_norm) == (name == "above"), f"clip/{name}: total norm {norm} vs max_norm {max_norm}"
            print(f"clip/{name}: total norm {norm:.4f}, max_norm {max_norm}")

        for name, schedule, base_lr, warmup, total, *floor in SCHEDULE_CASES:
            min_lr = floor[0] if floor else 0.0
            grp = f.create_group(f"schedules/{name}")
            grp.attrs["schedule"] = np.bytes_(schedule)
            grp.attrs["base_lr"] = np.float64(base_lr)
            grp.attrs["min_lr"] = np.float64(min_lr)
            grp.attrs["warmup"] = warmup
            grp.attrs["total"] = total
            steps = np.arange(total + 3, dtype=np.int64)
            grp["step"] = steps
            grp["lr"] = np.array([scheduled_lr(base_lr, schedule, int(s), warmup, total, min_lr) for s in steps],
                                 dtype=np.float64)
        print(f"schedules: {len(SCHEDULE_CASES)} cases")


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} OUT.h5", file=sys.stderr)
        return 2
    generate(argv[1])
    print(f"wrote {argv[1]} (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
