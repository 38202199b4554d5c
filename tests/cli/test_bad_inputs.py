"""Bad input of every kind ends with exit status 2, one line on stderr that names
what is wrong and where (file:line:column for a config file), nothing on stdout,
no new run directory, and no change to an existing run (README.md, "Command line").

    /usr/bin/python3 tests/cli/test_bad_inputs.py ATTNLAB_BINARY REPO_ROOT
"""
import fcntl
import os
import re
import shutil
import tempfile
import unittest

import h5py
import numpy as np

import cli_common as cc


def config_text(bad_section, bad_lines):
    """The tiny config as TOML with `bad_lines` right under `[bad_section]` (lines 2, 3, ...).
    Keys the bad lines set are left out of the rest, so the file has no duplicate key."""
    sections = {name: dict(keys) for name, keys in cc.TINY_SECTIONS.items()}
    for line in bad_lines:
        key = line.split("=", 1)[0].strip()
        sections.get(bad_section, {}).pop(key, None)
    out = [f"[{bad_section}]"] + list(bad_lines)
    out += [f"{k} = {v}" for k, v in sections.pop(bad_section, {}).items()]
    for name, keys in sections.items():
        out.append(f"[{name}]")
        out += [f"{k} = {v}" for k, v in keys.items()]
    return "\n".join(out) + "\n"


# Each case: args (with {runs}, {broken}, {files} placeholders), an optional
# config file {cfg} (section, bad lines), the substrings the one line must hold,
# and for a config file the line the message must point at.
CASES = [
    # --- config files: file:line:column ---
    dict(name="config syntax error", cfg=("model", ["heads = "]), line=2, want=["TOML syntax error"]),
    dict(name="unknown key in file (suggestion)", cfg=("model", ["head = 2"]), line=2,
         want=["unknown key model.head", "did you mean model.heads?"]),
    dict(name="unknown section in file (suggestion)", cfg=("modle", ["heads = 2"]), line=2,
         want=["modle", "did you mean model.heads?"]),
    dict(name="wrong type in file", cfg=("model", ['heads = "four"']), line=2,
         want=["model.heads", "expected an integer"]),
    dict(name="out of range in file", cfg=("model", ["layers = 0"]), line=2, want=["model.layers", ">= 1", "0"]),
    dict(name="width not divisible by heads", cfg=("model", ["width = 15"]), line=2,
         want=["model.width", "15", "model.heads"]),
    dict(name="kv_heads does not divide heads", cfg=("model", ["heads = 4", "kv_heads = 3"]), line=3,
         want=["model.kv_heads", "3", "model.heads = 4"]),
    dict(name="max_len shorter than the task", cfg=("model", ["max_len = 3"]), line=2,
         want=["model.max_len", "3", "shorter"]),
    dict(name="task/model kind mismatch in file", cfg=("task", ['name = "translate"']), line=2,
         want=["model.kind", "translate", "encoder-decoder"]),
    dict(name="bad enum value in file", cfg=("model", ['norm = "middle"']), line=2, want=["model.norm", "middle"]),
    # --- overrides ---
    dict(name="override unknown key (suggestion)", args=["model.headz=2"],
         want=["override", "model.headz", "did you mean model.heads?"]),
    dict(name="override wrong type", args=["model.heads=abc"], want=["override", "model.heads", "expected an integer"]),
    dict(name="override out of range", args=["train.steps=0"], want=["train.steps", ">= 1"]),
    dict(name="override wrong array length", args=["optim.betas=[0.9]"], want=["optim.betas", "array"]),
    dict(name="override bad enum value", args=["model.norm=middle"], want=["model.norm", "middle"]),
    dict(name="norm type not a norm", args=["model.norm_type=rms"], want=["model.norm_type", "rms", "rmsnorm"]),
    dict(name="norm type in file", cfg=("model", ['norm_type = "batchnorm"']), line=2, want=["model.norm_type", "batchnorm"]),
    dict(name="negative window", args=["model.window=-2"], want=["model.window", ">= 0", "-2"]),
    dict(name="pack too short for the task", args=["task.name=copy", "task.pack=5"], want=["task.pack", "cannot hold", "<BOS>"]),
    dict(name="pack on a file-less encoder-decoder task", args=["task.name=translate", "model.kind=encoder-decoder", "task.pack=40"],
         want=["task.pack", "only used when"]),
    dict(name="documents without packing", args=["task.name=copy", "model.documents=true"],
         want=["model.documents", "task.pack > 0"]),
    dict(name="prefix-LM on a task with no <SEP>", args=["task.name=induction", "model.prefix_lm=true"],
         want=["model.prefix_lm", "<SEP>"]),
    dict(name="prefix_lm not a boolean", cfg=("model", ['prefix_lm = 1']), line=2, want=["model.prefix_lm", "expected"]),
    dict(name="window not an integer", cfg=("model", ['window = 2.5']), line=2, want=["model.window", "expected an integer"]),
    dict(name="sinks not a boolean", cfg=("model", ['sinks = 3']), line=2, want=["model.sinks", "expected a boolean"]),
    dict(name="too few relative buckets", args=["model.rel_buckets=2"], want=["model.rel_buckets", "at least 4", "2"]),
    dict(name="relative bias reach too short", args=["model.rel_buckets=16", "model.rel_max_distance=8"],
         want=["model.rel_max_distance", "exceed", "8"]),
    dict(name="negative softcap", args=["model.softcap=-1"], want=["model.softcap", ">= 0", "-1"]),
    dict(name="softcap not a number", cfg=("model", ['softcap = "big"']), line=2, want=["model.softcap", "expected a float"]),
    dict(name="override width not divisible", args=["model.width=15"], want=["model.width", "model.heads"]),
    dict(name="override task/model mismatch", args=["model.kind=encoder-decoder"],
         want=["model.kind", "recall", "decoder"]),
    dict(name="override min_len > max_len", args=["task.min_len=7"], want=["task.min_len", "task.max_len"]),
    dict(name="override without '=' is a missing config file", args=["model.heads"],
         want=["model.heads", "no such config file", "did you mean model.heads=VALUE?"]),
    dict(name="override split in two words", args=["model.heads", "8"],
         want=["model.heads", "no such config file", "did you mean model.heads=8?"]),
    dict(name="mistyped option (suggestion)", cmd=["train", "--resmue", "{runs}/base"],
         want=["unknown option --resmue", "did you mean --resume?"]),
    dict(name="mistyped option of eval (suggestion)", cmd=["eval", "--batchs", "2", "{runs}/base"],
         want=["unknown option --batchs", "did you mean --batches?"]),
    dict(name="eval of a folder without checkpoints", cmd=["eval", "{broken}/notarun"],
         want=["notarun", "without checkpoints"]),
    dict(name="two config files", args=["{files}/ok.toml", "{files}/ok2.toml"],
         want=["more than one config file", "ok.toml", "ok2.toml"]),
    dict(name="missing config file", args=["{files}/nope.toml"], want=["nope.toml", "no such config file"]),
    dict(name="train.device=cuda without a GPU", args=["train.device=cuda"], want=["train.device"], needs_no_gpu=True),
    dict(name="deterministic reduce on the device", args=["train.device=cuda", "train.reduce=deterministic"],
         want=["train.reduce", "on the cpu"]),
    dict(name="micro-batches that do not divide the batch", args=["train.reduce=deterministic", "train.micro_batches=3"],
         want=["train.micro_batches", "does not divide train.batch"]),
    dict(name="an unknown reduce", args=["train.reduce=ring"], want=["train.reduce"]),
    dict(name="file task without task.path", args=["task.name=file"], want=["task.path"]),
    dict(name="file task with a missing token file", args=["task.name=file", "task.path={files}/no_tokens.h5"],
         want=["no_tokens.h5"]),
    dict(name="file task with a token >= vocab", args=["task.name=file", "task.path={files}/tokens_big.h5"],
         want=["tokens_big.h5", "tokens[3, 2] = 40", "vocab"]),
    # a data file is checked for what it is before it is read: a FIFO hung, a device filled memory
    dict(name="file task on a FIFO", args=["task.name=file", "task.path={special}/pipe.h5"],
         want=["task.path {special}/pipe.h5: not a regular file (a FIFO)"]),
    dict(name="file task on a directory", args=["task.name=file", "task.path={special}"],
         want=["task.path {special}: not a regular file (a directory)"]),
    dict(name="file task on a device", args=["task.name=file", "task.path=/dev/zero"],
         want=["task.path /dev/zero: not a regular file (a character device)"]),
    dict(name="text task on a FIFO", args=["task.name=text", "task.path={special}/pipe.txt"],
         want=["task.path {special}/pipe.txt: not a regular file (a FIFO)"]),
    dict(name="text task on a device", args=["task.name=text", "task.path=/dev/zero"],
         want=["task.path /dev/zero: not a regular file (a character device)"]),
    dict(name="text task on a 2 GiB sparse file", args=["task.name=text", "task.path={special}/sparse.txt"],
         want=["task.path {special}/sparse.txt: 2147483648 bytes, more than the 268435456 (256 MiB) a text task reads"]),
    dict(name="text task with an alphabet that repeats a letter",
         args=["task.name=text", "task.path={files}/notes.txt", "task.alphabet=aab", "task.vocab=3"],
         want=["task.alphabet", "U+0061 at character 1 repeats character 0"]),
    dict(name="text task with an unsorted alphabet (file)",
         cfg=("task", ['name = "text"', 'path = "x.txt"', 'alphabet = "ba"', "vocab = 2"]), line=4,
         want=["task.alphabet", "U+0061 at character 1 comes before U+0062 at character 0"]),
    dict(name="text task with an alphabet of another size than task.vocab",
         args=["task.name=text", "task.path={files}/notes.txt", "task.alphabet=abc"],
         want=["task.alphabet", "3 characters, but task.vocab = 32"]),
    # keys that the other keys leave unread: one rule, refused naming the setting that reads them
    dict(name="rotary base with learned positions", args=["model.rotary_base=500"],
         want=["model.rotary_base", 'only used when model.positional = "rotary"', 'model.positional = "learned"']),
    dict(name="rotary base with ALiBi (file)", cfg=("model", ['positional = "alibi"', "rotary_base = 500.0"]), line=3,
         want=["model.rotary_base", 'model.positional = "alibi"']),
    dict(name="task.vocab on a text task", args=["task.name=text", "task.path={files}/notes.txt", "task.vocab=50"],
         want=["task.vocab", "only used when task.alphabet is given with it", "the vocabulary is the alphabet"]),
    dict(name="momentum with adamw", args=["optim.momentum=0.5"], want=["optim.momentum", 'optim.name = "sgd"']),
    dict(name="betas with sgd", args=["optim.name=sgd", "optim.betas=[0.8,0.9]"], want=["optim.betas", 'optim.name = "sgd"']),
    dict(name="queries on a copy task", args=["task.name=copy", "task.queries=2"], want=["task.queries", 'task.name = "copy"']),
    dict(name="activation without a feed-forward layer", args=["model.ffn=0", "model.activation=relu"],
         want=["model.activation", "model.ffn = 0"]),
    dict(name="norm type without a norm", args=["model.norm=none", "model.norm_type=rmsnorm"], want=["model.norm_type", "model.norm"]),
    dict(name="micro-batches with the fast reduce", args=["train.micro_batches=4"], want=["train.micro_batches", "train.reduce"]),
    dict(name="schedule steps with a constant schedule", args=["optim.schedule=constant", "optim.schedule_steps=10"],
         want=["optim.schedule_steps", 'optim.schedule = "constant"']),
    dict(name="min_len of a file task", args=["task.name=file", "task.path={files}/tokens_big.h5", "task.min_len=2"],
         want=["task.min_len", 'task.name = "file"']),
    # task.tokenizer is checked as import checks it (BpeTokenizer::for_model), before the run is made
    dict(name="task.tokenizer that does not exist",
         args=["task.name=file", "task.path={files}/tokens_ok.h5", "task.tokenizer={files}/no_tokenizer"],
         want=["task.tokenizer {files}/no_tokenizer: no such folder"]),
    dict(name="task.tokenizer that is a file",
         args=["task.name=file", "task.path={files}/tokens_ok.h5", "task.tokenizer={files}/notes.txt"],
         want=["task.tokenizer {files}/notes.txt: not a folder"]),
    dict(name="task.tokenizer folder without a tokenizer",
         args=["task.name=file", "task.path={files}/tokens_ok.h5", "task.tokenizer={files}/tok_none"],
         want=["task.tokenizer {files}/tok_none: no tokenizer.json, nor vocab.json and merges.txt"]),
    dict(name="task.tokenizer whose vocab.json is not JSON",
         args=["task.name=file", "task.path={files}/tokens_ok.h5", "task.tokenizer={files}/tok_bad_json"],
         want=["task.tokenizer {files}/tok_bad_json/vocab.json: not valid JSON"]),
    dict(name="task.tokenizer with more tokens than task.vocab",
         args=["task.name=file", "task.path={files}/tokens_ok.h5", "task.tokenizer={files}/tok40"],
         want=["task.tokenizer {files}/tok40: the tokenizer has 40 tokens, more than the model's vocabulary of 32"]),
    # --- commands and options ---
    dict(name="unknown command", cmd=["trian"], want=["trian", "unknown command"]),
    dict(name="unknown option (train)", args=["--bogus"], want=["bogus"]),
    dict(name="unknown option (eval)", cmd=["eval", "--bogus", "{files}/trunc.h5"], want=["bogus"]),
    dict(name="eval without a checkpoint", cmd=["eval"], want=["CHECKPOINT"]),
    dict(name="eval --batches 0", cmd=["eval", "--batches", "0", "{runs}/base/checkpoints/step_0000040.h5"],
         want=["--batches", "0"]),
    # --- --resume ---
    dict(name="--resume of a folder that is not a run", cmd=["train", "--resume", "{broken}/notarun"],
         want=["notarun", "not a run directory"]),
    dict(name="--resume of a missing folder", cmd=["train", "--resume", "{broken}/absent"], want=["absent"]),
    dict(name="--resume with overrides", cmd=["train", "--resume", "{runs}/base", "model.heads=2"],
         want=["--resume"]),
    dict(name="--resume of a truncated checkpoint", cmd=["train", "--resume", "{broken}/trunc"],
         want=["step_0000040.h5", "truncated"]),
    dict(name="--resume of another format_version", cmd=["train", "--resume", "{broken}/fv"],
         want=["step_0000040.h5", "format_version"]),
    # --- eval ---
    dict(name="eval of a missing file", cmd=["eval", "{files}/absent.h5"], want=["absent.h5"]),
    dict(name="eval of a non-HDF5 file", cmd=["eval", "{files}/notes.txt"], want=["notes.txt", "HDF5"]),
    dict(name="eval of a truncated checkpoint", cmd=["eval", "{files}/trunc.h5"], want=["trunc.h5", "truncated"]),
    dict(name="eval of params that do not match the config", cmd=["eval", "{files}/noparam.h5"],
         want=["noparam.h5", "head.weight"]),
    dict(name="eval of another format_version", cmd=["eval", "{files}/fv.h5"], want=["fv.h5", "format_version"]),
    dict(name="eval of a checkpoint with a broken config", cmd=["eval", "{files}/badcfg.h5"],
         want=["badcfg.h5", "TOML syntax error"], line=1),
    dict(name="eval of a metrics file", cmd=["eval", "{runs}/base/metrics.h5"], want=["metrics.h5", "checkpoint"]),

    # --- names and paths that the filesystem would read otherwise (a NUL once hung the free-name loop) ---
    dict(name="NUL in run.name (file)", cfg=("run", [r'name = "base\u0000x"']), line=2,
         want=["run.name", "control characters", "U+0000"]),
    dict(name="newline in run.name (file)", cfg=("run", [r'name = "a\nb"']), line=2, want=["run.name", "control characters"]),
    dict(name="tab in run.name (override)", args=["run.name=a\tb"], want=["run.name", "control characters", "U+0009"]),
    dict(name="NUL in run.out_dir (file)", cfg=("run", [r'out_dir = "runs\u0000"']), line=2, want=["run.out_dir", "control"]),
    dict(name="NUL in task.path (file)", cfg=("task", ['name = "file"', r'path = "t.h5\u0000x"']), line=3,
         want=["task.path", "control"]),
    dict(name="run.name longer than a folder name", args=["run.name=" + "n" * 300],
         want=["run.name", "at most 240 bytes", "300"]),
    dict(name="override longer than 255 bytes is not a file path", args=["task.name=file", "task.path=/" + "p" * 400],
         want=["task.path", "/" + "p" * 59, "characters)"]),  # named by a bounded prefix, never echoed whole
    dict(name="run.out_dir longer than a path", args=["run.out_dir=" + "d/" * 2100], want=["run.out_dir", "4000 bytes"]),
    dict(name="run.name that is a file (free-name search)", args=["run.out_dir={files}", "run.name=notes.txt", "model.width=15"],
         want=["model.width"]),

    # --- sizes: estimated before anything is allocated ---
    dict(name="model.width 1e11", args=["model.width=100000000000"],
         want=["model.width = 100000000000", "would need about", "this machine has"]),
    dict(name="model.layers 1e11", args=["model.layers=100000000000"], want=["model.layers = 100000000000", "would need"]),
    dict(name="train.batch 1e11", args=["train.batch=100000000000"], want=["train.batch = 100000000000", "would need"]),
    dict(name="model.ffn 1e11", args=["model.ffn=100000000000"], want=["model.ffn", "would need"]),
    dict(name="train.eval_batches 1e11", args=["train.eval_batches=100000000000"],
         want=["train.eval_batches", "must be in [1, 100000], got 100000000000"]),
    dict(name="heads x head_width both 2^32 (a product that wraps)",
         args=["model.heads=4294967296", "model.head_width=4294967296"], want=["would need", "this machine has"]),
    dict(name="kv_heads 2^32 with heads 2^32", args=["model.heads=4294967296", "model.kv_heads=4294967296", "model.width=4294967296"],
         want=["would need"]),
    dict(name="task.max_len 1e11 (sequence length)", args=["task.name=copy", "task.max_len=100000000000"],
         want=["task.max_len = 100000000000", "would need"]),
    dict(name="recall with more pairs than keys", args=["task.max_len=100000000000"], want=["task.max_len", "distinct keys"]),
    dict(name="model.max_len 1e11", args=["model.max_len=100000000000"], want=["model.max_len", "would need"]),
    dict(name="model.width in a file: 1e11 (file:line)", cfg=("model", ["width = 100000000000"]), line=2,
         want=["model.width", "would need"]),
    dict(name="integer beyond 2^53", args=["train.steps=9007199254740993"], want=["train.steps", "at most"]),
    dict(name="integer beyond int64 (override)", args=["model.width=99999999999999999999"],
         want=["model.width", "expected an integer"]),
    dict(name="integer beyond int64 (file)", cfg=("model", ["width = 99999999999999999999"]), line=2, want=["TOML syntax error"]),
    dict(name="train.threads 100000", args=["train.threads=100000"], want=["train.threads", "1024"]),
    dict(name="train.eval_batches 3000000 (evaluation would never end)", args=["train.eval_batches=3000000"],
         want=["train.eval_batches", "100000"]),
    dict(name="train --keys with other arguments", cmd=["train", "--keys", "extra"], want=["--keys", "nothing else"]),
    dict(name="negative seed", args=["run.seed=-1"], want=["run.seed"]),

    # --- floats that float32 turns into 0 or inf ---
    dict(name="optim.eps 1e-320 (0 in float32)", args=["optim.eps=1e-320"], want=["optim.eps", "float32"]),
    dict(name="model.scale 1e300 (inf in float32)", args=["model.scale=1e300"], want=["model.scale", "float32"]),
    dict(name="model.scale 1e-50 as a string", args=['model.scale="1e-50"'], want=["model.scale", "float32"]),
    dict(name="optim.lr 1e-40 (subnormal)", args=["optim.lr=1e-40"], want=["optim.lr", "float32"]),
    dict(name="optim.weight_decay 1e39", args=["optim.weight_decay=1e39"], want=["optim.weight_decay", "float32"]),
    dict(name="optim.clip inf", args=["optim.clip=inf"], want=["optim.clip"]),
    dict(name="optim.lr nan", args=["optim.lr=nan"], want=["optim.lr"]),
    dict(name="optim.betas element 1e-300", args=["optim.betas=[1e-300, 0.9]"], want=["optim.betas", "float32"]),
    dict(name="optim.eps in a file: 1e-320 (file:line)", cfg=("optim", ["eps = 1e-320"]), line=2, want=["optim.eps", "float32"]),

    # --- the sweep grid (checked when any config is read) ---
    dict(name="duplicate value in a sweep list", cfg=("sweep", ['"model.heads" = [2, 2]']), line=2,
         want=["model.heads", "repeats element 0"]),
    dict(name="duplicate value written two ways (2 and 2.0)", cfg=("sweep", ['"optim.lr" = [0.5, 5e-1]']), line=2,
         want=["optim.lr", "repeats"]),
    dict(name="a section as a sweep key", cfg=("sweep", ["model = [1, 2]"]), line=2,
         want=["sweep key model is a section", '"model.kind" = [...]']),
    dict(name="the same sweep key written two ways", cfg=("sweep", ['"model.heads" = [1, 2]', "model.heads = [4]"]),
         want=["model.heads", "swept twice"]),

    # --- command-line numbers ---
    dict(name="eval --batches abc", cmd=["eval", "--batches", "abc", "{runs}/base/checkpoints/step_0000040.h5"],
         want=["--batches", "expected an integer", "abc"]),
    dict(name="eval --batches 1e30", cmd=["eval", "--batches", "99999999999999999999", "{runs}/base/checkpoints/step_0000040.h5"],
         want=["--batches", "99999999999999999999"]),
    dict(name="eval --seed -1", cmd=["eval", "--seed", "-1", "{runs}/base/checkpoints/step_0000040.h5"], want=["--seed", "-1"]),
    dict(name="eval --seed 1.5", cmd=["eval", "--seed", "1.5", "{runs}/base/checkpoints/step_0000040.h5"],
         want=["--seed", "expected an integer"]),
    dict(name="audit --batches x", cmd=["audit", "--batches", "x", "{runs}/base/checkpoints/step_0000040.h5"],
         want=["--batches", "'x'"]),
    dict(name="ablate --batches -3", cmd=["ablate", "--batches", "-3", "{runs}/base/checkpoints/step_0000040.h5"],
         want=["--batches", "-3"]),
    dict(name="ablate --together out of range", cmd=["ablate", "--together", "0.99999999999999999999",
                                                     "{runs}/base/checkpoints/step_0000040.h5", "--out", "{files}/never.h5"],
         want=["0.99999999999999999999"]),
    dict(name="ablate --together a head past the model", cmd=["ablate", "--together", "0.7",
                                                              "{runs}/base/checkpoints/step_0000040.h5", "--out", "{files}/never.h5"],
         want=["0.7", "heads"]),
    dict(name="generate --max-new 1e5", cmd=["generate", "{runs}/base/checkpoints/step_0000040.h5", "--prompt", "3 4",
                                             "--max-new", "1e5"], want=["--max-new", "expected an integer"]),
    dict(name="generate --temperature nan", cmd=["generate", "{runs}/base/checkpoints/step_0000040.h5", "--prompt", "3 4",
                                                 "--temperature", "nan"], want=["--temperature"]),
    dict(name="generate --top-k huge", cmd=["generate", "{runs}/base/checkpoints/step_0000040.h5", "--prompt", "3 4",
                                            "--top-k", "99999999999999999999"], want=["--top-k"]),
    dict(name="generate --seed abc", cmd=["generate", "{runs}/base/checkpoints/step_0000040.h5", "--prompt", "3 4",
                                          "--seed", "abc"], want=["--seed", "abc"]),
    dict(name="generate a token id beyond int64", cmd=["generate", "{runs}/base/checkpoints/step_0000040.h5", "--prompt",
                                                        "3 99999999999999999999"], want=["99999999999999999999"]),
    dict(name="inspect a token id beyond int64", cmd=["inspect", "{runs}/base/checkpoints/step_0000040.h5", "--tokens",
                                                       "3 99999999999999999999", "--out", "{files}/never.h5"],
         want=["--tokens", "99999999999999999999"]),
    dict(name="gradcheck of an unknown op", cmd=["gradcheck", "no_such_op"], want=["no_such_op"]),
    dict(name="inspect --out that is a symbolic link (never replaced)",
         cmd=["inspect", "{runs}/base", "--tokens", "3 4", "--out", "{files}/link_out.h5"],
         want=["link_out.h5 exists and is not a regular file"]),
    dict(name="ablate --out that is a symbolic link (never replaced)",
         cmd=["ablate", "{runs}/base", "--out", "{files}/link_out.h5"], want=["link_out.h5 exists and is not a regular file"]),
    # every check before the first byte: heads --checkpoints all printed the earlier steps, then refused the last
    dict(name="heads --checkpoints all whose last checkpoint is cut short",
         cmd=["heads", "{broken}/lastbad", "--checkpoints", "all"], want=["step_0000040.h5", "truncated"]),

    # --- resume: a run is never damaged ---
    dict(name="--resume of a finished run", cmd=["train", "--resume", "{runs}/base"], want=["finished", "train.steps = 40"]),
    dict(name="--resume from a checkpoint whose step disagrees with its name",
         cmd=["train", "--resume", "{broken}/stepname"], want=["step_0000030.h5", "step attribute says 40"]),
    dict(name="--resume with an edited model key", cmd=["train", "--resume", "{broken}/edited"],
         want=["config.toml", "model.heads (1, was 2)", "train.steps"]),
    dict(name="--resume with an edited optimiser key", cmd=["train", "--resume", "{broken}/edited_lr"],
         want=["optim.lr (0.5, was 0.001)"]),
    dict(name="--resume with a missing parameter names the file", cmd=["train", "--resume", "{broken}/noparam"],
         want=["step_0000030.h5", "head.weight"]),
    dict(name="--resume of a run another process holds", cmd=["train", "--resume", "{broken}/locked"],
         want=["locked", "in use by another attnlab process", "pid {holder}"]),
    dict(name="--run-dir of an existing run", args=["--run-dir", "{runs}/base"], want=["--run-dir", "already exists"]),
]


# The CUDA case is about a machine without a GPU (where even a CUDA build must refuse).
HAS_GPU = os.path.exists("/dev/nvidia0")


class BadInputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="attnlab_cli_bad_")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)  # also when setUpClass fails
        cls.runs = os.path.join(cls.tmp, "runs")
        cls.broken = os.path.join(cls.tmp, "broken")
        cls.files = os.path.join(cls.tmp, "files")
        cls.special = os.path.join(cls.tmp, "special")  # never hashed: reading a FIFO would hang
        os.makedirs(cls.broken)
        os.makedirs(cls.files)
        os.makedirs(cls.special)
        os.mkfifo(os.path.join(cls.special, "pipe.h5"))
        os.mkfifo(os.path.join(cls.special, "pipe.txt"))
        with open(os.path.join(cls.special, "sparse.txt"), "wb") as f:
            f.truncate(2 << 30)
        # A real run that every bad train command points at (run.out_dir, run.name).
        r = cc.attnlab(["train"] + cc.overrides(**{"run.out_dir": cls.runs, "run.name": "base"}), cls.tmp)
        assert r.returncode == 0, r.stderr
        base = os.path.join(cls.runs, "base")
        assert cc.checkpoint_steps(base) == [20, 30, 40], cc.checkpoint_steps(base)
        newest = cc.checkpoint_path(base, 40)

        os.makedirs(os.path.join(cls.broken, "notarun", "checkpoints"))
        with open(os.path.join(cls.broken, "notarun", "notes.txt"), "w") as f:
            f.write("not a run\n")
        # A run whose only checkpoint is cut short.
        trunc = os.path.join(cls.broken, "trunc")
        shutil.copytree(base, trunc)
        for step in (20, 30):
            os.remove(cc.checkpoint_path(trunc, step))
        cut = os.path.getsize(newest) // 2
        with open(cc.checkpoint_path(trunc, 40), "r+b") as f:
            f.truncate(cut)
        shutil.copy(cc.checkpoint_path(trunc, 40), os.path.join(cls.files, "trunc.h5"))
        # A run whose checkpoints say format_version 2.
        fv = os.path.join(cls.broken, "fv")
        shutil.copytree(base, fv)
        for step in cc.checkpoint_steps(fv):
            with h5py.File(cc.checkpoint_path(fv, step), "r+") as h:
                h.attrs["format_version"] = np.int64(2)
        shutil.copy(cc.checkpoint_path(fv, 40), os.path.join(cls.files, "fv.h5"))
        # A checkpoint missing a parameter, and one with a broken config attribute.
        shutil.copy(newest, os.path.join(cls.files, "noparam.h5"))
        with h5py.File(os.path.join(cls.files, "noparam.h5"), "r+") as h:
            del h["params/head.weight"]
        shutil.copy(newest, os.path.join(cls.files, "badcfg.h5"))
        with h5py.File(os.path.join(cls.files, "badcfg.h5"), "r+") as h:
            h.attrs["config"] = "[model\nheads = 2\n"
        with open(os.path.join(cls.files, "notes.txt"), "w") as f:
            f.write("this is not HDF5\n" * 50)
        os.symlink(os.path.join(cls.files, "notes.txt"), os.path.join(cls.files, "link_out.h5"))
        # Unfinished copies of the run (step 30 of 40), each broken one way for --resume.
        def unfinished(name):
            folder = os.path.join(cls.broken, name)
            shutil.copytree(base, folder)
            os.remove(cc.checkpoint_path(folder, 40))
            return folder
        stepname = unfinished("stepname")  # the step-40 checkpoint under the name of step 30
        shutil.copy(newest, cc.checkpoint_path(stepname, 30))
        for name, old, new in (("edited", "heads = 2", "heads = 1"), ("edited_lr", "lr = 0.001", "lr = 0.5")):
            path = os.path.join(unfinished(name), "config.toml")
            with open(path) as f:
                text = f.read()
            assert old in text, (old, text)
            with open(path, "w") as f:
                f.write(text.replace(old, new, 1))
        with h5py.File(cc.checkpoint_path(unfinished("noparam"), 30), "r+") as h:
            del h["params/head.weight"]
        # A run whose lock this test process holds, as a running attnlab would.
        locked = unfinished("locked")
        cls.lock_file = open(os.path.join(locked, ".lock"), "r+")
        fcntl.flock(cls.lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        cls.lock_file.truncate(0)
        cls.lock_file.write(str(os.getpid()))
        cls.lock_file.flush()
        # Token file with a token >= vocab (32) at a valid position.
        tokens = np.full((8, 10), 5, np.int32)
        tokens[3, 2] = 40
        with h5py.File(os.path.join(cls.files, "tokens_big.h5"), "w") as h:
            h.create_dataset("tokens", data=tokens)
            h.create_dataset("lengths", data=np.full(8, 10, np.int64))
        # A token file within the vocabulary, and tokenizer folders for task.tokenizer (GPT-2's
        # vocab.json + merges.txt: 40 letters, more than task.vocab = 32; a folder without
        # them; one whose vocab.json is not JSON).
        with h5py.File(os.path.join(cls.files, "tokens_ok.h5"), "w") as h:
            h.create_dataset("tokens", data=np.full((8, 10), 5, np.int32))
            h.create_dataset("lengths", data=np.full(8, 10, np.int64))
        letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
        for folder, vocab in (("tok40", "{" + ", ".join(f'"{c}": {i}' for i, c in enumerate(letters)) + "}"),
                              ("tok_bad_json", '{"a": 0,}')):
            os.makedirs(os.path.join(cls.files, folder))
            with open(os.path.join(cls.files, folder, "vocab.json"), "w") as f:
                f.write(vocab)
            with open(os.path.join(cls.files, folder, "merges.txt"), "w") as f:
                f.write("#version: 0.2\n")
        os.makedirs(os.path.join(cls.files, "tok_none"))
        # A run whose last checkpoint (of three) is cut short.
        lastbad = os.path.join(cls.broken, "lastbad")
        shutil.copytree(base, lastbad)
        with open(cc.checkpoint_path(lastbad, 40), "r+b") as f:
            f.truncate(cut)
        for name in ("ok.toml", "ok2.toml"):
            with open(os.path.join(cls.files, name), "w") as f:
                f.write(config_text("run", [f'out_dir = "{cls.runs}"', 'name = "base"']))

        cls.before = {d: cc.tree_hashes(d) for d in (cls.runs, cls.broken, cls.files)}

    @classmethod
    def tearDownClass(cls):
        cls.lock_file.close()

    def fill(self, text):
        return text.format(runs=self.runs, broken=self.broken, files=self.files, special=self.special, holder=os.getpid())

    def check_case(self, index, case):
        cwd = os.path.join(self.tmp, f"case{index:02d}")
        os.makedirs(cwd)
        # Train commands aim at the existing run; the tiny config keeps an
        # accepted command (a failure) short.
        target = [f"run.out_dir={self.runs}", "run.name=base"]
        cfg_path = None
        if "cfg" in case:
            section, lines = case["cfg"]
            cfg_path = os.path.join(self.files, f"case{index:02d}.toml")
            with open(cfg_path, "w") as f:
                f.write(config_text(section, lines))
            self.before[self.files] = cc.tree_hashes(self.files)
            args = ["train", cfg_path] + target
        elif "cmd" in case:
            args = [self.fill(a) for a in case["cmd"]]
        else:
            args = ["train"] + cc.overrides() + target + [self.fill(a) for a in case["args"]]
        line, shown = cc.run_refused(self, args, cwd, self.runs, [self.fill(w) for w in case["want"]], self.before)
        if "line" in case:
            source = re.escape(cfg_path) if cfg_path else r"[^:]+"
            m = re.search(source + r"(?: \(config attribute\))?:(\d+):(\d+): ", line)
            self.assertIsNotNone(m, "no file:line:column in:\n" + shown)
            self.assertEqual(int(m.group(1)), case["line"], shown)
            self.assertGreaterEqual(int(m.group(2)), 1, shown)

    def test_table_has_enough_cases(self):
        self.assertGreaterEqual(len(CASES), 100)

    def test_bad_inputs(self):
        for index, case in enumerate(CASES):
            with self.subTest(case=case["name"]):
                if case.get("needs_no_gpu") and HAS_GPU:
                    self.skipTest("this machine has a GPU")
                self.check_case(index, case)

    def test_good_config_file_is_accepted(self):
        # The control: the same machinery with a valid file runs (so the table's
        # failures come from the bad lines, not from the harness).
        cfg = os.path.join(self.tmp, "good.toml")
        out = os.path.join(self.tmp, "good_runs")
        with open(cfg, "w") as f:
            f.write(config_text("model", ["heads = 4"]))
        r = cc.attnlab(["train", cfg, f"run.out_dir={out}"], self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(os.path.join(out, "default", "summary.json")))


if __name__ == "__main__":
    cc.main()
