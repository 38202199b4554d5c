"""What a hook may leave at a point (layers/hooks.h, HookValues), through the
Python module: the attention scores may hold -inf (a key knocked out, as the
mask's are), never NaN or +inf; every other point only finite values; and the
rule holds alike for a replacement the hook returns and for its input edited in
place. A row of scores left all -inf has no eligible key: refused under
masked_rows "error" (the default), zero weights under "zero".

    PYTHONPATH=build/python ATTNLAB_BINARY=build/attnlab /usr/bin/python3 -m pytest -q tests/python/test_scores_hook.py
"""
import os
import sys
import unittest

import numpy as np

import attnlab
import tiny_runs
from tiny_runs import decoder, decoder_zero_rows

SEQ = [3, 9, 4, 12, 5, 3, 9, 4, 12]
SCORES, PATTERN = "blocks.0.attn.scores", "blocks.0.attn.pattern"


def knocked_out(scores, query, key):
    out = scores.copy()
    out[:, :, query, key] = -np.inf
    return out


class ScoresHook(unittest.TestCase):
    def test_returning_the_scores_is_the_plain_forward(self):
        m = attnlab.load(decoder())
        clean = m.run(SEQ)
        for hook in (lambda s, n: s, lambda s, n: s.copy(), lambda s, n: None):
            np.testing.assert_allclose(m.run_with_hooks(SEQ, {SCORES: hook}), clean, rtol=0, atol=1e-5)

    def test_knockout_by_replacement_and_in_place_alike(self):
        m = attnlab.load(decoder())
        clean = m.run(SEQ)

        def in_place(s, n):
            s[:, :, 6, 2] = -np.inf

        replaced, cache = m.run_with_hooks(SEQ, {SCORES: lambda s, n: knocked_out(s, 6, 2)}, names=PATTERN)
        edited = m.run_with_hooks(SEQ, {SCORES: in_place})
        np.testing.assert_array_equal(edited, replaced)
        self.assertFalse(np.allclose(replaced, clean, atol=1e-6))
        pattern = cache[PATTERN]
        self.assertEqual(float(np.abs(pattern[:, :, 6, 2]).max()), 0.0)  # no weight on the knocked-out key
        np.testing.assert_allclose(pattern.sum(-1), 1.0, rtol=0, atol=1e-6)  # the others' weights renormalised

    def test_nan_and_plus_inf_are_refused_either_way(self):
        m = attnlab.load(decoder())
        clean = m.run(SEQ)

        def set_value(value, copy):
            def hook(s, n):
                out = s.copy() if copy else s
                out[0, 1, 4, 0] = value
                return out if copy else None
            return hook
        for value in (np.nan, np.inf):
            for copy in (True, False):
                with self.subTest(value=value, copy=copy):
                    with self.assertRaises(ValueError) as raised:
                        m.run_with_hooks(SEQ, {SCORES: set_value(value, copy)})
                    self.assertIn(f"{SCORES}: after the hook it holds a non-finite value, {value} at (0, 1, 4, 0)",
                                  str(raised.exception))
                    self.assertIn("scores may be -inf", str(raised.exception))
        # elsewhere -inf too is refused, and an edit in place as a replacement is
        for point in ("blocks.0.attn.z", "blocks.1.attn.pattern", "embed"):
            for copy in (True, False):
                with self.subTest(point=point, copy=copy):
                    def hook(a, n, copy=copy):
                        out = a.copy() if copy else a
                        out.flat[3] = -np.inf
                        return out if copy else None
                    with self.assertRaises(ValueError) as raised:
                        m.run_with_hooks(SEQ, {point: hook})
                    self.assertIn(f"{point}: after the hook it holds a non-finite value, -inf at", str(raised.exception))
                    self.assertIn("only finite values may follow a hook here", str(raised.exception))
        np.testing.assert_array_equal(m.run(SEQ), clean)  # the model as it was

    def test_a_row_of_only_minus_inf_follows_the_masked_rows_policy(self):
        def all_keys(s, n):
            s[0, 1, 4, :] = -np.inf  # query 4 of head 1: every key, the masked ones (-inf already) included
        strict = attnlab.load(decoder())
        with self.assertRaises(ValueError) as raised:
            strict.run_with_hooks(SEQ, {SCORES: all_keys})
        self.assertIn(f"[attention] {SCORES}: batch item 0, head 1, query position 4 has no key left after the hook",
                      str(raised.exception))
        self.assertIn('masked_rows = "error"', str(raised.exception))
        lenient = attnlab.load(decoder_zero_rows())
        logits, cache = lenient.run_with_hooks(SEQ, {SCORES: all_keys}, names=f"{PATTERN},blocks.0.attn.z")
        self.assertTrue(np.all(np.isfinite(logits)))
        self.assertEqual(float(np.abs(cache[PATTERN][0, 1, 4]).max()), 0.0)  # no weight
        self.assertEqual(float(np.abs(cache["blocks.0.attn.z"][0, 4, 1]).max()), 0.0)  # no context
        np.testing.assert_allclose(np.delete(cache[PATTERN][0, 1], 4, axis=0).sum(-1), 1.0, rtol=0, atol=1e-6)
        # the model as it was after either (its gradient there: tests/layers/test_hooks.cpp)
        np.testing.assert_array_equal(strict.run(SEQ), attnlab.load(decoder()).run(SEQ))


if __name__ == "__main__":
    if len(sys.argv) > 2:  # as test_module.py: ATTNLAB_BINARY REPO_ROOT
        tiny_runs.ATTNLAB = os.path.abspath(sys.argv.pop(1))
        tiny_runs.REPO_ROOT = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
