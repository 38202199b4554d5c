"""The Python module's arguments (python/attnlab/inputs.py): every function
the module exports takes token lists, lengths, names, hooks, paths and options
through one check each, so that a value of the wrong type is a TypeError and
one out of range a ValueError, both naming the argument (and the item), before
anything runs or is written; a hook that calls back into its own model gets a
RuntimeError; and the model stays usable after every refusal.

    PYTHONPATH=build/python ATTNLAB_BINARY=build/attnlab /usr/bin/python3 -m pytest -q tests/python/test_inputs.py
"""
import os
import sys
import unittest

import numpy as np
import torch

import attnlab
import tiny_runs
from tiny_runs import decoder

SEQ = [3, 9, 4, 12, 5, 3, 9, 4, 12]


class Refused(unittest.TestCase):
    def refused(self, cases):
        """cases: (call, exception type, text its message contains)."""
        for call, kind, message in cases:
            with self.subTest(message=message):
                with self.assertRaises(kind) as raised:
                    call()
                self.assertIs(type(raised.exception), kind, raised.exception)
                self.assertIn(message, str(raised.exception))
                self.assertLess(len(str(raised.exception)), 300)  # one line, not a signature dump


class Tokens(Refused):
    """One conversion for token lists: tokens, src, ids, and the commands' prompts."""

    def test_every_integer_form_is_accepted(self):
        m = attnlab.load(decoder())
        one = m.run(SEQ)
        for form in (np.array(SEQ, np.uint8), np.array([SEQ], np.int16), torch.tensor(SEQ), torch.tensor([SEQ]),
                     torch.tensor(SEQ, dtype=torch.int32), list(torch.tensor(SEQ)), tuple(SEQ),
                     [np.int64(t) for t in SEQ]):
            with self.subTest(form=type(form).__name__):
                np.testing.assert_array_equal(m.run(form), one)
        # rows of any integer form, ragged: padded, each with its own length
        np.testing.assert_array_equal(m.run([torch.tensor(SEQ), np.array(SEQ[:4])]), m.run([SEQ, SEQ[:4]]))

    def test_floats_bools_strings_and_none_are_refused(self):
        m = attnlab.load(decoder())
        self.refused([
            (lambda: m.run([3.0, 7.0]), TypeError, "tokens[0]: 3.0 (float) is not a token id"),
            (lambda: m.run([3, 7.9]), TypeError, "tokens[1]: 7.9 (float) is not a token id"),
            (lambda: m.run(["3", "7"]), TypeError, "tokens[0]: '3' (str) is not a token id"),
            (lambda: m.run([True, False]), TypeError, "tokens[0]: True (bool) is not a token id"),
            (lambda: m.run(None), TypeError, "tokens: expected token ids"),
            (lambda: m.run(3), TypeError, "tokens: expected token ids"),
            (lambda: m.run([SEQ, [3, None]]), TypeError, "tokens[1][1]: None (NoneType) is not a token id"),
            (lambda: m.run([3, [4, 5]]), TypeError, "tokens[0]: 3 (int) is not a sequence of token ids"),
            (lambda: m.run(torch.tensor([3.0, 7.0])), TypeError, "tokens: expected integers, got an array of dtype float32"),
            (lambda: m.run(torch.tensor([True])), TypeError, "tokens: expected integers, got an array of dtype bool"),
            (lambda: m.run(np.zeros((1, 2, 3), np.int64)), ValueError, "tokens: expected one sequence or a (batch, positions) array"),
            (lambda: m.run([SEQ, []]), ValueError, "tokens[1]: an empty sequence"),
            (lambda: m.run([3, -1]), ValueError, "tokens: token -1 is outside the vocabulary [0, 24)"),
            (lambda: m.run(torch.tensor([3, 24])), ValueError, "tokens: token 24 is outside the vocabulary [0, 24)"),
            (lambda: m.run([3, 2 ** 70]), ValueError, "is outside the vocabulary [0, 24)"),
            (lambda: m.run(SEQ, src=[3.0]), TypeError, "src[0]: 3.0 (float) is not a token id"),
            (lambda: m.run(SEQ, src_lengths=[2]), ValueError, "src_lengths: given without src"),
            (lambda: m.to_text([3.7]), TypeError, "ids[0]: 3.7 (float) is not a token id"),
            (lambda: m.to_tokens(5), TypeError, "text: expected a str"),
            (lambda: m.run_with_cache([3.0], names="embed"), TypeError, "tokens[0]"),
            (lambda: m.grad([3.0], np.zeros((1, 1, 24)), names="embed"), TypeError, "tokens[0]"),
        ])
        np.testing.assert_array_equal(m.run(SEQ), m.run(np.array(SEQ)))  # still usable

    def test_lengths(self):
        m = attnlab.load(decoder())
        np.testing.assert_array_equal(m.run([SEQ], lengths=np.array([5])), m.run([SEQ], lengths=[5]))
        np.testing.assert_array_equal(m.run([SEQ], lengths=torch.tensor([5])), m.run([SEQ], lengths=[5]))
        self.refused([
            (lambda: m.run([SEQ], lengths=[-1]), ValueError, "lengths: -1 is not in [1, 9]"),
            (lambda: m.run([SEQ], lengths=[10]), ValueError, "lengths: 10 is not in [1, 9]"),
            (lambda: m.run([SEQ], lengths=[2.5]), TypeError, "lengths[0]: 2.5 (float) is not a length"),
            (lambda: m.run([SEQ], lengths=[True]), TypeError, "lengths[0]: True (bool) is not a length"),
            (lambda: m.run([SEQ], lengths=3), TypeError, "lengths: expected a list of integers"),
            (lambda: m.run([SEQ], lengths=np.array([2.0])), TypeError, "lengths: expected a list of integers"),
            (lambda: m.run([SEQ], lengths=[3, 4]), ValueError, "lengths: 2 lengths for 1 sequences"),
        ])


class NamesAndHooks(Refused):
    def test_names_hooks_paths(self):
        m = attnlab.load(decoder())
        self.refused([
            (lambda: m.run_with_cache(SEQ, names=5), TypeError, "names: expected a hook point name"),
            (lambda: m.run_with_cache(SEQ, names=[5]), TypeError, "names[0]: 5 (int) is not a hook point name"),
            (lambda: m.run_with_cache(SEQ, names="embed,"), ValueError, "names: an empty name in 'embed,'"),
            (lambda: m.run_with_hooks(SEQ, {}, names=[None]), TypeError, "names[0]: None"),
            (lambda: m.grad(SEQ, np.zeros((1, 9, 24)), names=5), TypeError, "names: expected a hook point name"),
            (lambda: m.run_with_hooks(SEQ, {5: lambda z, n: None}), TypeError, "hooks: the key 5 (int) is not a hook point name"),
            (lambda: m.run_with_hooks(SEQ, [("embed", print)]), TypeError, "hooks: expected a dict"),
            (lambda: m.run_with_hooks(SEQ, {"embed": 3}), TypeError, "hooks['embed']: 3 (int) is not callable"),
            (lambda: m.match(5), TypeError, "pattern: expected a str"),
            (lambda: attnlab.load(None), TypeError, "path: expected a path"),
            (lambda: attnlab.load(decoder(), device=5), TypeError, "device: expected a str"),
            (lambda: attnlab.read_h5(5), TypeError, "path: expected a path"),
        ])

    def test_a_hook_that_runs_its_own_model(self):
        m = attnlab.load(decoder())
        clean = m.run(SEQ)
        calls = {
            "run": lambda: m.run(SEQ),
            "run_with_cache": lambda: m.run_with_cache(SEQ, names="embed"),
            "run_with_hooks": lambda: m.run_with_hooks(SEQ, {"embed": lambda x, n: None}),
            "grad": lambda: m.grad(SEQ, np.ones((1, 9, 24), np.float32), names="embed"),
        }
        for name, call in calls.items():
            with self.subTest(call=name):
                with self.assertRaises(RuntimeError) as raised:
                    m.run_with_hooks(SEQ, {"blocks.0.attn.z": lambda z, n: call()})
                self.assertIn("a hook may not run the model it hooks", str(raised.exception))
                self.assertNotIsInstance(raised.exception, RecursionError)
                np.testing.assert_array_equal(m.run(SEQ), clean)  # usable, hooks detached
        # another Model (of the same checkpoint) may run inside a hook
        other = attnlab.load(decoder())
        seen = []
        m.run_with_hooks(SEQ, {"blocks.0.attn.z": lambda z, n: seen.append(other.run(SEQ))})
        np.testing.assert_array_equal(seen[0], clean)


class Metric(Refused):
    def test_one_rule_for_the_metrics_gradient(self):
        """W and the gradient a metric function returns: any real array, cast to the
        logits' dtype alike (float64 W was refused while metric(logits) cast silently)."""
        m = attnlab.load(decoder())
        w = np.random.default_rng(0).standard_normal((1, 9, 24)).astype(np.float32)
        value, grads = m.grad(SEQ, w, names="embed")
        for form in (w.astype(np.float64), torch.tensor(w)):
            v, g = m.grad(SEQ, form, names="embed")
            self.assertEqual(v, value)
            np.testing.assert_array_equal(g["embed"], grads["embed"])
        _, g = m.grad(SEQ, lambda logits: (0.0, w.astype(np.float64)), names="embed")
        np.testing.assert_array_equal(g["embed"], grads["embed"])
        one_hot = np.zeros((1, 9, 24), np.int64)
        one_hot[0, -1, 5] = 1
        v, _ = m.grad(SEQ, one_hot, names="embed")
        self.assertAlmostEqual(v, float(m.run(SEQ)[0, -1, 5]), places=5)
        self.refused([
            (lambda: m.grad(SEQ, np.ones((1, 9, 24), bool), names="embed"), TypeError, "metric: expected an array of numbers, got dtype bool"),
            (lambda: m.grad(SEQ, None, names="embed"), TypeError, "metric: expected an array of numbers, got None"),
            (lambda: m.grad(SEQ, "W", names="embed"), TypeError, "metric: expected an array of numbers"),
            (lambda: m.grad(SEQ, lambda out: ("x", w), names="embed"), TypeError, "metric: the value metric(logits) returned is 'x'"),
            (lambda: m.grad(SEQ, lambda out: (0.0, "w"), names="embed"), TypeError, "metric: the gradient metric(logits) returned"),
            (lambda: m.grad(SEQ, lambda out: 1.0, names="embed"), TypeError, "metric: metric(logits) must return"),
            (lambda: m.grad(SEQ, np.full((1, 9, 24), 1e300), names="embed"), ValueError, "is beyond float32's range"),
            (lambda: m.grad(SEQ, np.full((1, 9, 24), np.nan), names="embed"), ValueError, "holds a non-finite value"),
        ])


class Commands(Refused):
    """patch, ablate, lens and train: every option checked before the binary runs."""

    def test_bad_options_write_nothing(self):
        run = decoder()
        out = os.path.join(tiny_runs.root(), "refused.patch.h5")
        clean, corrupt = [3, 9, 4, 12, 5, 3, 9, 4], [3, 8, 4, 12, 5, 3, 8, 4]
        before = sorted(os.listdir(os.path.join(run, "checkpoints")))
        self.refused([
            (lambda: attnlab.patch(run, clean=["3", "9"], corrupt=[3, 8], out=out), TypeError, "clean[0]: '3' (str) is not a token id"),
            (lambda: attnlab.patch(run, clean=[3.7, 9], corrupt=[3, 8], out=out), TypeError, "clean[0]: 3.7 (float) is not a token id"),
            (lambda: attnlab.patch(run, clean=clean, corrupt=np.array(corrupt, float), out=out), TypeError, "corrupt: expected integers"),
            (lambda: attnlab.patch(run, clean=clean, corrupt=[3, -8], out=out), ValueError, "corrupt: token -8 is negative"),
            (lambda: attnlab.patch(run, clean=clean, corrupt=corrupt, positions=[1.0], out=out), TypeError, "positions[0]: 1.0 (float) is not a position"),
            (lambda: attnlab.patch(run, clean=clean, corrupt=corrupt, hooks=["z", 5], out=out), TypeError, "hooks[1]: 5 (int) is not a hook point name"),
            (lambda: attnlab.patch(run, clean=clean, corrupt=corrupt, top=object(), out=out), TypeError, "top: <object object"),
            (lambda: attnlab.patch(run, clean=clean, corrupt=corrupt, out=5), TypeError, "out: expected a path"),
            (lambda: attnlab.patch(None, clean=clean, corrupt=corrupt), TypeError, "checkpoint: expected a path"),
            (lambda: attnlab.lens(run, tokens=torch.tensor([3.0, 4.0]), out=out), TypeError, "tokens: expected integers"),
            (lambda: attnlab.train(5), TypeError, "config: expected a TOML file's path or a dict"),
            (lambda: attnlab.train(overrides=[("model.heads", 2)]), TypeError, "overrides: expected a dict"),
            (lambda: attnlab.train(overrides={"model.heads": None}), TypeError, "model.heads: None (NoneType) is not a config value"),
            (lambda: attnlab.train({"model": {2: 4}}), TypeError, "config: the key 2 (int) in model is not a name"),
            (lambda: attnlab.train(resume=5), TypeError, "resume: expected a path"),
        ])
        self.assertFalse(os.path.exists(out))
        self.assertEqual(sorted(os.listdir(os.path.join(run, "checkpoints"))), before)  # no default output beside it either

    def test_out_is_written_once_and_read_back(self):
        """patch(out=FILE): the CLI writes FILE, and that file is what comes back
        (it wrote FILE and then raised about its own temporary path)."""
        run = decoder()
        out = os.path.join(tiny_runs.root(), "kept.patch.h5")
        grid = attnlab.patch(run, clean=[3, 9, 4, 12, 5, 3, 9, 4], corrupt=[3, 8, 4, 12, 5, 3, 8, 4], answers="9:8",
                             hooks=["z"], out=out)
        self.assertEqual(grid["attrs"]["format"], "attnlab-patch")
        np.testing.assert_array_equal(attnlab.read_h5(out)["grid"]["z"]["values"], grid["grid"]["z"]["values"])
        lensed = attnlab.lens(run, tokens=torch.tensor(SEQ))  # a tensor of ids for the CLI too
        np.testing.assert_allclose(lensed["lens"]["logits"][-1], attnlab.load(run).run(SEQ), rtol=0, atol=1e-6)

    def test_read_h5_names_the_file(self):
        folder = tiny_runs.root()
        text = os.path.join(folder, "notes.txt")
        with open(text, "w") as f:
            f.write("not hdf5")
        self.refused([
            (lambda: attnlab.read_h5(text), ValueError, f"{text}: not an HDF5 file"),
            (lambda: attnlab.read_h5(folder), ValueError, f"{folder}: a folder, not an HDF5 file"),
        ])
        with self.assertRaises(FileNotFoundError) as raised:
            attnlab.read_h5(os.path.join(folder, "missing.h5"))
        self.assertIn(os.path.join(folder, "missing.h5"), str(raised.exception))


if __name__ == "__main__":
    if len(sys.argv) > 2:  # as test_module.py: ATTNLAB_BINARY REPO_ROOT
        tiny_runs.ATTNLAB = os.path.abspath(sys.argv.pop(1))
        tiny_runs.REPO_ROOT = os.path.abspath(sys.argv.pop(1))
        os.environ["ATTNLAB_BINARY"] = tiny_runs.ATTNLAB
    unittest.main(verbosity=2)
