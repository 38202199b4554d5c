"""`attnlab inspect` and the PyTorch bridge (tools/torch_bridge.py), end to end.

For tiny checkpoints of both model kinds and several architectures (pre/post/no
norm, learned/sinusoidal/no positions, ffn 0, relu, no bias, kv_heads 1 and 2,
head_width, every scale), `attnlab inspect` writes OUT.h5 for one sequence
(--tokens) and for a right-padded batch (--input); the test checks the layout,
that every attention row sums to 1 over its eligible keys with exactly 0 on the
others, that layer 0 of the hidden states is embedding + position, padding
invariance, and that the PyTorch module the bridge builds agrees on the logits
within 1e-4. Bad arguments and bad files end with exit status 2 and one line.

    /usr/bin/python3 tests/cli/test_inspect_bridge.py ATTNLAB_BINARY REPO_ROOT
"""
import math
import os
import re
import shutil
import subprocess
import sys
import unittest

import h5py
import numpy as np

import cli_common as cc

PYTHON = "/usr/bin/python3"
TOLERANCE = 1e-4
LOGITS_DIFF = re.compile(r"max \|logits diff\| (\S+)")

# A tiny run that ends with one checkpoint at step 10.
SHORT = dict(cc.TINY, **{"train.steps": "10", "train.checkpoint_every": "10", "train.eval_every": "10",
                         "train.log_every": "5"})
ENC_DEC = {"task.name": "translate", "model.kind": "encoder-decoder"}

BRIDGE_DIFFS = {}  # variant -> [max |logits diff| per comparison], printed at the end


def bridge(args, timeout=120):
    script = os.path.join(cc.REPO_ROOT, "tools", "torch_bridge.py")
    return subprocess.run([PYTHON, script] + list(args), env=cc.env(), capture_output=True, text=True,
                          timeout=timeout)


def lengths_name(tokens_name):
    return "lengths" if tokens_name == "tokens" else f"{tokens_name}_lengths"


def sinusoidal(T, D):
    p = np.arange(T, dtype=np.float64)[:, None]
    i = np.arange(D)
    angle = p / np.power(10000.0, (i - i % 2) / D)[None, :]
    return np.where(i % 2 == 0, np.sin(angle), np.cos(angle))


def train_checkpoint(test, label, **changes):
    out = test.path(re.sub(r"[^A-Za-z0-9]+", "_", label))
    test.run_ok(["train"] + cc.overrides(SHORT, **changes, **{"run.out_dir": out}))
    path = cc.checkpoint_path(os.path.join(out, "default"), 10)
    test.assertTrue(os.path.isfile(path), path)
    return path


class InspectAndBridge(cc.TempDirTest):
    # ---- checks on one OUT.h5 ------------------------------------------------

    def check_layout(self, out, checkpoint):
        with h5py.File(checkpoint, "r") as ck:
            config_text = ck.attrs["config"]
            params = {k: v[()] for k, v in ck["params"].items()}
        with h5py.File(out, "r") as f:
            a = f.attrs
            self.assertEqual(a["format"], "attnlab-inspect")
            self.assertEqual(int(a["format_version"]), 1)
            self.assertEqual(int(a["step"]), 10)
            self.assertEqual(a["checkpoint"], checkpoint)
            self.assertEqual(a["config"], config_text)
            layers, heads, kind = int(a["layers"]), int(a["heads"]), a["kind"]
            enc_dec = kind == "encoder-decoder"
            vocab = params["tok_emb.weight" if "head.weight" not in params else "head.weight"].shape[0]
            width = params["tok_emb.weight" if "head.weight" not in params else "head.weight"].shape[1]
            dec_tokens = "tgt" if enc_dec else "tokens"
            tokens, lengths = f[dec_tokens][()], f[lengths_name(dec_tokens)][()]
            self.assertEqual(tokens.dtype, np.int32)
            self.assertEqual(lengths.dtype, np.int64)
            B, T = tokens.shape
            logits = f["logits"][()]
            self.assertEqual(logits.dtype, np.float32)
            self.assertEqual(logits.shape, (B, T, vocab))
            self.assertTrue(np.all(np.isfinite(logits)))
            expected_kinds = {"enc_self", "dec_self", "cross"} if enc_dec else {"self"}
            self.assertEqual(set(f["attention"].keys()), expected_kinds)
            for name in expected_kinds:
                self.check_attention(f, name, layers, heads, sinks=re.search(r"sinks = true", config_text) is not None,
                                     token_rules={rule: re.search(rf"{rule} = true", config_text) is not None
                                                  for rule in ("prefix_lm", "documents")})
            self.assertEqual(set(f["hidden"].keys()), {"encoder", "decoder"} if enc_dec else {"decoder"})
            parts = [("decoder", dec_tokens, "tgt_" if enc_dec else "")]
            if enc_dec:
                parts.append(("encoder", "src", "src_"))
            positional = re.search(r'positional = "(\w+)"', config_text).group(1)
            for part, tokens_name, prefix in parts:
                group = f["hidden"][part]
                self.assertEqual(sorted(group.keys()), [f"layer_{l}" for l in range(layers + 1)])
                toks = f[tokens_name][()]
                for l in range(layers + 1):
                    self.assertEqual(group[f"layer_{l}"].shape, toks.shape + (width,))
                    self.assertEqual(group[f"layer_{l}"].dtype, np.float32)
                # layer_0 = token embedding + position code
                expected = params[f"{prefix or 'tok_'}emb.weight"][toks].astype(np.float64)
                if positional == "learned":
                    expected += params[f"{prefix}pos_emb.weight"][: toks.shape[1]]
                elif positional == "sinusoidal":
                    expected += sinusoidal(toks.shape[1], width)
                np.testing.assert_allclose(group["layer_0"][()], expected, atol=1e-5, err_msg=f"{part} layer_0")
            return f[dec_tokens][()], f[lengths_name(dec_tokens)][()], logits

    def check_attention(self, f, kind, layers, heads, sinks=False, token_rules=None):
        """With attention sinks (self-attention), each row's sink takes a share: rows sum to (0, 1].
        token_rules: {"prefix_lm": bool, "documents": bool}, which decoder self-attention reads off its tokens:
        eligibility is then the bridge's (tools/torch_bridge.py), written from the documented rules."""
        g = f["attention"][kind]
        q_name, k_name, causal = g.attrs["queries"], g.attrs["keys"], bool(g.attrs["causal"])
        self.assertEqual((kind in ("self", "dec_self")), causal, kind)
        k_lengths = f[lengths_name(k_name)][()]
        B, Tq = f[q_name].shape
        Tk = f[k_name].shape[1]
        i, j = np.arange(Tq)[:, None], np.arange(Tk)[None, :]
        eligible = j[None] < k_lengths[:, None, None]  # (B, 1, Tk)
        if causal:
            eligible = eligible & (j <= i + (Tk - Tq))[None]
        eligible = np.broadcast_to(eligible, (B, Tq, Tk))[:, None]  # (B, 1, Tq, Tk)
        if causal and token_rules and any(token_rules.values()):
            import torch
            sys.path.insert(0, os.path.join(cc.REPO_ROOT, "tools"))
            from torch_bridge import eligibility
            eligible = eligibility(torch.from_numpy(k_lengths.astype(np.int64)), Tq, Tk, causal=True,
                                   tokens=torch.from_numpy(f[k_name][()].astype(np.int64)), **token_rules).numpy()[:, None]
        self.assertEqual(g["score_std"].shape, (layers, heads))
        self.assertTrue(np.all(np.isfinite(g["score_std"][()])))
        self.assertEqual(sorted(n for n in g if n.startswith("layer_")), [f"layer_{l}" for l in range(layers)])
        for l in range(layers):
            w = g[f"layer_{l}"][()]
            where = f"attention/{kind}/layer_{l}"
            self.assertEqual(w.shape, (B, heads, Tq, Tk), where)
            self.assertEqual(w.dtype, np.float32, where)
            self.assertTrue(np.all(w >= 0), where)
            masked = np.where(eligible, 0.0, w)
            self.assertEqual(float(np.max(masked)), 0.0, f"{where}: weight on ineligible keys")
            sums = np.where(eligible, w, 0.0).sum(axis=-1, dtype=np.float64)
            if sinks and kind != "cross":
                self.assertTrue(np.all((sums > 0) & (sums <= 1.0 + 1e-5)), f"{where}: rows over eligible keys, with sinks")
            else:
                np.testing.assert_allclose(sums, 1.0, atol=1e-5, err_msg=f"{where}: rows over eligible keys")

    def run_bridge(self, variant, checkpoint, out, *extra):
        r = bridge([checkpoint, "--compare", out] + list(extra))
        shown = f"torch_bridge {checkpoint} --compare {out}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        self.assertEqual(r.returncode, 0, shown)
        m = LOGITS_DIFF.search(r.stdout)
        self.assertIsNotNone(m, shown)
        diff = float(m.group(1))
        self.assertLessEqual(diff, TOLERANCE, shown)
        BRIDGE_DIFFS.setdefault(variant, []).append(diff)
        return r.stdout

    # ---- one architecture -----------------------------------------------------

    def check_variant(self, variant, specials=False, **changes):
        """specials: the decoder's tokens hold <SEP> (1) and <BOS> (2), which the token rules read."""
        checkpoint = train_checkpoint(self, variant, **changes)
        enc_dec = changes.get("model__kind", SHORT.get("model.kind")) == "encoder-decoder" or \
            changes.get("task__name") == "translate"
        rng = np.random.default_rng(len(variant))
        vocab = 32
        # A right-padded batch; padded cells hold junk that inspect must replace by <PAD>.
        if enc_dec:
            src_lengths = np.array([6, 3, 1], np.int64)
            tgt_lengths = np.array([4, 6, 2], np.int64)
            src = rng.integers(3, vocab, (3, 6)).astype(np.int32)
            tgt = rng.integers(3, vocab, (3, 6)).astype(np.int32)
            tgt[:, 0] = 2
            rows = {"src": src, "src_lengths": src_lengths, "tgt": tgt, "tgt_lengths": tgt_lengths}
        else:
            lengths = np.array([8, 5, 1], np.int64)
            tokens = rng.integers(3, vocab, (3, 8)).astype(np.int32)
            if specials:  # row 0: x x SEP x BOS x SEP x; row 1: x x SEP BOS x
                tokens[:2, 2], tokens[0, 4], tokens[0, 6], tokens[1, 3] = 1, 2, 1, 2
            rows = {"tokens": tokens, "lengths": lengths}
        in_path = self.path("in.h5")
        with h5py.File(in_path, "w") as f:
            for name, value in rows.items():
                f[name] = value
        batch_out = self.path("batch.h5")
        self.run_ok(["inspect", checkpoint, "--input", in_path, "--out", batch_out])
        dec_tokens, dec_lengths, batch_logits = self.check_layout(batch_out, checkpoint)
        with h5py.File(batch_out, "r") as f:
            for name, value in rows.items():
                if name.endswith("lengths"):
                    np.testing.assert_array_equal(f[name][()], value)
                else:
                    L = rows[lengths_name(name)]
                    valid = np.arange(value.shape[1])[None, :] < L[:, None]
                    np.testing.assert_array_equal(f[name][()], np.where(valid, value, 0), err_msg=name)
        self.run_bridge(variant, checkpoint, batch_out)

        # One sequence via --tokens: row 1 of the batch without its padding.
        one_out = self.path("one.h5")
        if enc_dec:
            src_ids = " ".join(map(str, rows["src"][1, : rows["src_lengths"][1]]))
            tgt_ids = " ".join(map(str, rows["tgt"][1, : rows["tgt_lengths"][1]]))
            self.run_ok(["inspect", checkpoint, "--tokens", src_ids, "--target", tgt_ids, "--out", one_out])
        else:
            ids = " ".join(map(str, rows["tokens"][1, : rows["lengths"][1]]))
            r = self.run_ok(["inspect", checkpoint, "--tokens", ids, "--out", one_out])
            self.assertIn(f"input {ids} -> argmax", r.stdout)
        _, one_lengths, one_logits = self.check_layout(one_out, checkpoint)
        n = int(dec_lengths[1])
        self.assertEqual(one_logits.shape[:2], (1, n))
        # Padding invariance: the padded batch row gives the same logits at its valid positions.
        np.testing.assert_allclose(one_logits[0], batch_logits[1, :n], atol=1e-5, err_msg="padding changed logits")
        self.run_bridge(variant, checkpoint, one_out)

        if enc_dec:  # default decoder input: just <BOS>
            bos_out = self.path("bos.h5")
            self.run_ok(["inspect", checkpoint, "--tokens", "5 6 7", "--out", bos_out])
            with h5py.File(bos_out, "r") as f:
                np.testing.assert_array_equal(f["tgt"][()], [[2]])
                self.assertEqual(f["logits"].shape, (1, 1, vocab))
        return checkpoint, batch_out

    # Decoder-only
    def test_decoder_pre_learned_gelu(self):
        checkpoint, out = self.check_variant("decoder pre/learned/ffn/gelu")
        r = self.run_bridge("decoder pre/learned/ffn/gelu (nn.MultiheadAttention)", checkpoint, out, "--nn-mha")
        self.assertIn("nn.MultiheadAttention ran 1 of 1 attention layers", r)

    def test_decoder_post_sinusoidal_relu(self):
        self.check_variant("decoder post/sinusoidal/relu, 2 layers", model__norm="post",
                           model__positional="sinusoidal", model__activation="relu", model__layers=2)

    def test_decoder_attention_only_kv1(self):
        self.check_variant("decoder ffn 0, norm none, no positions, kv_heads 1, scale linear, no bias",
                           model__ffn=0, model__norm="none", model__positional="none", model__heads=4,
                           model__kv_heads=1, model__scale="linear", model__bias="false", model__layers=2)

    def test_decoder_nanogpt_biases_and_tied_embeddings(self):
        # nanoGPT's bias = False and weight tying: no bias anywhere, head = tok_emb.weight
        checkpoint, _ = self.check_variant("decoder tied, no biases (nanoGPT)", model__bias="false", model__ffn_bias="false",
                                           model__norm_bias="false", model__tie_embeddings="true", model__layers=2)
        with h5py.File(checkpoint, "r") as f:
            names = list(f["params"])
        self.assertNotIn("head.weight", names)
        self.assertFalse([n for n in names if n.endswith(".bias")], names)
        self.check_variant("decoder post, tied, no LayerNorm bias", model__norm="post", model__norm_bias="false",
                           model__tie_embeddings="true")

    def test_decoder_ablated_heads(self):
        # model.ablate_heads: those heads' outputs are zero in attnlab and in the bridge alike
        self.check_variant("decoder, heads 0.1 and 1.0 ablated", model__layers=2, model__ablate_heads='["0.1", "1.0"]')

    def test_decoder_head_width_scale_number(self):
        self.check_variant("decoder head_width 6, kv_heads 2, scale 0.3", model__heads=4, model__kv_heads=2,
                           model__head_width=6, model__scale="0.3")

    def test_decoder_rmsnorm_pre_and_post(self):
        self.check_variant("decoder pre/rmsnorm", model__norm_type="rmsnorm")
        self.check_variant("decoder post/rmsnorm, 2 layers", model__norm_type="rmsnorm", model__norm="post",
                           model__layers=2)

    def test_decoder_scalenorm_pre_and_post(self):
        self.check_variant("decoder pre/scalenorm", model__norm_type="scalenorm")
        self.check_variant("decoder post/scalenorm, 2 layers", model__norm_type="scalenorm", model__norm="post",
                           model__layers=2)

    def test_window(self):
        self.check_variant("decoder window 3, 2 layers, ALiBi", model__window=3, model__layers=2, model__positional="alibi")
        self.check_variant("enc-dec window 2, padded", task__name="translate", model__kind="encoder-decoder", model__window=2)

    def test_prefix_lm_and_documents(self):
        self.check_variant("decoder prefix-LM, 2 layers", specials=True, model__prefix_lm="true", model__layers=2)
        self.check_variant("decoder packed documents, rotary", specials=True, task__pack=24, model__documents="true",
                           model__positional="rotary")
        self.check_variant("decoder prefix-LM in packed documents", specials=True, task__pack=24,
                           model__documents="true", model__prefix_lm="true")
        self.check_variant("decoder prefix-LM, window 3", specials=True, model__prefix_lm="true", model__window=3)
        self.check_variant("decoder prefix-LM in packed documents, window 3, ALiBi", specials=True, task__pack=24,
                           model__documents="true", model__prefix_lm="true", model__window=3, model__positional="alibi",
                           model__layers=2)

    def test_sinks(self):
        self.check_variant("decoder sinks, 2 layers, rotary", model__sinks="true", model__layers=2, model__positional="rotary")
        self.check_variant("enc-dec sinks, window 3", task__name="translate", model__kind="encoder-decoder",
                           model__sinks="true", model__window=3)

    def test_relative_bias(self):
        self.check_variant("decoder T5 bias 8/6, 2 layers", model__rel_buckets=8, model__rel_max_distance=6,
                           model__layers=2, model__positional="none")
        self.check_variant("enc-dec T5 bias 8/6", task__name="translate", model__kind="encoder-decoder",
                           model__rel_buckets=8, model__rel_max_distance=6)

    def test_softcap(self):
        self.check_variant("decoder softcap 1.5", model__softcap=1.5)
        self.check_variant("enc-dec softcap 2, ALiBi", task__name="translate", model__kind="encoder-decoder",
                           model__softcap=2.0, model__positional="alibi")

    def test_decoder_rotary(self):
        self.check_variant("decoder rotary, 2 layers, kv_heads 2", model__positional="rotary", model__layers=2,
                           model__heads=4, model__kv_heads=2)
        self.check_variant("decoder rotary, base 100, head_width 6", model__positional="rotary", model__rotary_base="100",
                           model__heads=2, model__head_width=6)

    def test_decoder_alibi(self):
        self.check_variant("decoder alibi, 4 heads, 2 layers", model__positional="alibi", model__layers=2, model__heads=4)
        self.check_variant("decoder alibi, 6 heads (not a power of two), kv_heads 3", model__positional="alibi",
                           model__heads=6, model__kv_heads=3, model__width=36)

    # Encoder-decoder
    def test_encoder_decoder_alibi(self):
        self.check_variant("enc-dec alibi (self-attention only)", task__name="translate", model__kind="encoder-decoder",
                           model__positional="alibi")

    def test_encoder_decoder_rotary(self):
        self.check_variant("enc-dec rotary (self-attention only)", task__name="translate", model__kind="encoder-decoder",
                           model__positional="rotary")

    def test_encoder_decoder_rmsnorm(self):
        self.check_variant("enc-dec pre/rmsnorm", task__name="translate", model__kind="encoder-decoder",
                           model__norm_type="rmsnorm")

    def test_encoder_decoder_pre_learned(self):
        checkpoint, out = self.check_variant("enc-dec pre/learned/ffn/gelu", task__name="translate",
                                             model__kind="encoder-decoder")
        r = self.run_bridge("enc-dec pre/learned/ffn/gelu (nn.MultiheadAttention)", checkpoint, out, "--nn-mha")
        self.assertIn("nn.MultiheadAttention ran 3 of 3 attention layers", r)

    def test_encoder_decoder_post_sinusoidal_ffn0_kv1(self):
        self.check_variant("enc-dec post/sinusoidal/ffn 0/kv_heads 1, 2 layers", task__name="translate",
                           model__kind="encoder-decoder", model__norm="post", model__positional="sinusoidal",
                           model__ffn=0, model__heads=4, model__kv_heads=1, model__layers=2)

    def test_encoder_decoder_none_norm_relu_no_bias(self):
        self.check_variant("enc-dec norm none/scale none/relu/no bias", task__name="translate",
                           model__kind="encoder-decoder", model__norm="none", model__scale="none",
                           model__activation="relu", model__bias="false")

    # ---- PNG heatmaps and the bridge's own failures ----------------------------

    def test_png_heatmaps(self):
        checkpoint = train_checkpoint(self, "encdec", **ENC_DEC)
        out, png = self.path("out.h5"), self.path("png")
        r = self.run_ok(["inspect", checkpoint, "--tokens", "3 4 5", "--target", "2 9", "--out", out, "--png", png],
                        timeout=120)
        heads = int(SHORT["model.heads"])
        expected = {f"{k}_layer0_head{h}_seq0.png" for k in ("enc_self", "dec_self", "cross") for h in range(heads)}
        self.assertEqual(set(os.listdir(png)), expected, r.stdout)
        for name in expected:
            with open(os.path.join(png, name), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)

    def test_bridge_detects_disagreement_and_bad_input(self):
        checkpoint = train_checkpoint(self, "dec")
        other = train_checkpoint(self, "other", **{"run.seed": "3", "model.ffn": "16"})
        out = self.path("out.h5")
        self.run_ok(["inspect", checkpoint, "--tokens", "3 4 5 6", "--out", out])
        tampered = self.path("tampered.h5")
        shutil.copy(out, tampered)
        with h5py.File(tampered, "r+") as f:
            f["logits"][0, 1, 2] += 1e-3
        r = bridge([checkpoint, "--compare", tampered])
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("DISAGREE", r.stdout)
        for args, why in [([self.path("missing.h5"), "--compare", out], "no such file"),
                          ([out, "--compare", out], "format"),
                          ([other, "--compare", out], "another config"),
                          ([checkpoint, "--compare", checkpoint], "format")]:
            r = bridge(args)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stdout}{r.stderr}")
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn(why, r.stderr)
        # a [model] key the bridge does not know (a later attnlab's option) is refused by name, never ignored
        future = self.path("future.h5")
        shutil.copy(checkpoint, future)
        with h5py.File(future, "r+") as f:
            config = f.attrs["config"]
            config = config.decode() if isinstance(config, bytes) else config
            f.attrs["config"] = config.replace("[model]\n", "[model]\nfuture_option = 3\n", 1)
        r = bridge([future, "--compare", out])
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("model.future_option", r.stderr)


class BadInput(cc.TempDirTest):
    """Each bad invocation: exit 2, one line on stderr, no OUT.h5 (an existing one untouched), no OUT.h5.tmp."""

    def test_bad_arguments_and_files(self):
        checkpoint = train_checkpoint(self, "dec")
        encdec = train_checkpoint(self, "encdec", **ENC_DEC)
        out = self.path("out.h5")

        def make(name, writer):
            path = self.path(name)
            writer(path)
            return path

        def write_bytes(name, data):
            def write(p):
                with open(p, "wb") as f:
                    f.write(data)
            return make(name, write)

        text_file = write_bytes("notes.txt", b"not hdf5\n")
        with open(checkpoint, "rb") as f:
            data = f.read()
        truncated = write_bytes("truncated.h5", data[: len(data) // 2])

        def with_attr(path, name, value):
            shutil.copy(checkpoint, path)
            with h5py.File(path, "r+") as f:
                f.attrs[name] = value

        version2 = make("version2.h5", lambda p: with_attr(p, "format_version", 2))
        wrong_format = make("metrics_like.h5", lambda p: with_attr(p, "format", "attnlab-metrics"))

        def token_file(name, **datasets):
            def write(p):
                with h5py.File(p, "w") as f:
                    for k, v in datasets.items():
                        f[k] = v
            return make(name, write)

        no_tokens = token_file("no_tokens.h5", lengths=np.array([2]))
        bad_length = token_file("bad_length.h5", tokens=np.array([[3, 4, 5]], np.int32), lengths=np.array([4]))
        bad_token = token_file("bad_token.h5", tokens=np.array([[3, 40, 5]], np.int32), lengths=np.array([3]))
        flat = token_file("flat.h5", tokens=np.array([3, 4, 5], np.int32))
        floats = token_file("floats.h5", tokens=np.array([[3.0, 4.0]]))
        decoder_file = token_file("decoder_rows.h5", tokens=np.array([[3, 4]], np.int32))
        occupied = make("occupied", os.mkdir)
        a_file = write_bytes("a_file", b"x")

        cases = [
            ([], "CHECKPOINT"),
            ([checkpoint, "--tokens", "3 4"], "--out"),
            ([checkpoint, "--out", out], "--tokens or --input"),
            ([checkpoint, "--tokens", "3 4", "--input", decoder_file, "--out", out], "--tokens or --input"),
            ([checkpoint, checkpoint, "--tokens", "3", "--out", out], "exactly one"),
            ([checkpoint, "--tokens", "3", "--out", out, "--bogus"], "bogus"),
            ([self.path("missing.h5"), "--tokens", "3", "--out", out], "no such file"),
            ([text_file, "--tokens", "3", "--out", out], "not an HDF5 file"),
            ([truncated, "--tokens", "3", "--out", out], truncated),
            ([version2, "--tokens", "3", "--out", out], "format_version"),
            ([wrong_format, "--tokens", "3", "--out", out], "attnlab-metrics"),
            ([checkpoint, "--tokens", "3 x 5", "--out", out], "'x' is not a token id"),
            ([checkpoint, "--tokens", "3 32", "--out", out], "outside the vocabulary"),
            ([checkpoint, "--tokens", "-1", "--out", out], "outside the vocabulary"),
            ([checkpoint, "--tokens", "  ", "--out", out], "no token ids"),
            ([checkpoint, "--tokens", " ".join(["3"] * 40), "--out", out], "positional table"),
            ([checkpoint, "--tokens", "3", "--target", "2", "--out", out], "--target"),
            ([encdec, "--tokens", "3", "--target", "2 99", "--out", out], "--target"),
            ([checkpoint, "--input", self.path("none.h5"), "--out", out], "no such file"),
            ([checkpoint, "--input", text_file, "--out", out], "not an HDF5 file"),
            ([checkpoint, "--input", no_tokens, "--out", out], "/tokens"),
            ([checkpoint, "--input", bad_length, "--out", out], "/lengths"),
            ([checkpoint, "--input", bad_token, "--out", out], "outside the vocabulary"),
            ([checkpoint, "--input", flat, "--out", out], "[N, S]"),
            ([checkpoint, "--input", floats, "--out", out], "integers"),
            ([encdec, "--input", decoder_file, "--out", out], "/src"),
            ([checkpoint, "--tokens", "3", "--out", occupied], "directory"),
            ([checkpoint, "--tokens", "3", "--out", checkpoint], "an input of this command"),
            ([checkpoint, "--tokens", "3", "--out", out, "--png", a_file], "not a directory"),
        ]
        with open(checkpoint, "rb") as f:
            checkpoint_bytes = f.read()
        for args, needle in cases:
            for existing in (False, True):
                if existing:
                    with open(out, "w") as f:
                        f.write("old")
                elif os.path.exists(out):
                    os.remove(out)
                r = cc.attnlab(["inspect"] + args, self.tmp)
                shown = f"attnlab inspect {' '.join(args)}\nexit {r.returncode}\nstderr:\n{r.stderr}"
                self.assertEqual(r.returncode, 2, shown)
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, shown)
                self.assertTrue(lines[0].startswith("attnlab inspect: "), shown)
                if existing:  # a file that is not an inspect file: refused before anything else, and kept
                    self.assertTrue(needle in lines[0] or "refusing to replace" in lines[0], shown)
                    with open(out) as f:
                        self.assertEqual(f.read(), "old", shown)
                else:
                    self.assertIn(needle, lines[0], shown)
                if not existing and os.environ.get("SHOW_MESSAGES"):
                    print(lines[0], file=sys.stderr)
                self.assertEqual([n for n in os.listdir(os.path.dirname(out)) if n.endswith(".tmp")], [], shown)
                if existing:
                    with open(out) as f:
                        self.assertEqual(f.read(), "old", "a failed inspect changed an existing OUT.h5\n" + shown)
                else:
                    self.assertFalse(os.path.exists(out), shown)
        with open(checkpoint, "rb") as f:
            self.assertEqual(f.read(), checkpoint_bytes, "inspect changed the checkpoint")

    def test_comma_in_checkpoint_path_and_input_without_lengths(self):
        checkpoint = train_checkpoint(self, "dec")
        odd = self.path("a,b.h5")
        shutil.copy(checkpoint, odd)
        rows = self.path("rows.h5")
        with h5py.File(rows, "w") as f:
            f["tokens"] = np.array([[3, 4, 5], [6, 7, 8]], np.int32)  # no lengths: full rows
        out = self.path("out.h5")
        self.run_ok(["inspect", odd, "--input", rows, "--out", out])
        with h5py.File(out, "r") as f:
            np.testing.assert_array_equal(f["lengths"][()], [3, 3])
            self.assertEqual(f.attrs["checkpoint"], odd)

    def test_help(self):
        r = self.run_ok(["inspect", "--help"])
        for needle in ("/attention/<kind>/layer_<l>", "/hidden/decoder/layer_<l>", "/usr/bin/python3", "matplotlib",
                       "--target", "format_version"):
            self.assertIn(needle, r.stdout)


def tearDownModule():
    if BRIDGE_DIFFS:
        print("\nPyTorch bridge, max |logits diff| per comparison:", file=sys.stderr)
        for variant, diffs in BRIDGE_DIFFS.items():
            print(f"  {variant:78s} {' '.join(f'{d:.2e}' for d in diffs)}", file=sys.stderr)


if __name__ == "__main__":
    cc.main()
