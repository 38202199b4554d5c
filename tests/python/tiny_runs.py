"""Tiny runs the Python module's tests load: trained once per process by the
attnlab binary ($ATTNLAB_BINARY) into a temporary folder, removed at exit."""
import atexit
import os
import shutil
import subprocess
import tempfile

ATTNLAB = os.path.abspath(os.environ.get("ATTNLAB_BINARY", "build/attnlab"))
REPO_ROOT = os.path.abspath(os.environ.get("ATTNLAB_REPO_ROOT", os.path.join(os.path.dirname(__file__), "..", "..")))

TINY = ["model.width=16", "model.heads=2", "model.layers=2", "model.ffn=32", "train.steps=30", "train.batch=8",
        "train.log_every=10", "train.eval_every=30", "train.checkpoint_every=30", "train.eval_batches=1"]

_root = None


def root():
    """This process's temporary folder."""
    global _root
    if _root is None:
        _root = tempfile.mkdtemp(prefix="attnlab_python_")
        atexit.register(shutil.rmtree, _root, True)
    return _root


def trained(name, overrides):
    """The run folder of a tiny run with `overrides`, trained on first use."""
    run = os.path.join(root(), name)
    if not os.path.isdir(run):
        r = subprocess.run([ATTNLAB, "train"] + TINY + overrides + [f"run.out_dir={root()}", f"run.name={name}"],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        assert r.returncode == 0, f"attnlab train {name}: {r.stderr}"
    return run


def decoder():
    """induction, vocabulary 24, masked_rows "error" (the default)."""
    return trained("decoder", ["task.name=induction", "task.vocab=24"])


def decoder_zero_rows():
    """The same with masked_rows = "zero"."""
    return trained("decoder_zero_rows", ["task.name=induction", "task.vocab=24", "model.masked_rows=zero"])
