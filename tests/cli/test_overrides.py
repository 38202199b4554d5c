"""Overrides on the command line reach the resolved config as written, including
values with commas (cxxopts must not split them) and a config path given next to them."""
import os
import tomllib
import unittest

import cli_common as cli


class Overrides(unittest.TestCase):
    def setUp(self):
        self.tmp = cli.tempfile.mkdtemp(prefix="attnlab_overrides_")

    def tearDown(self):
        cli.shutil.rmtree(self.tmp, ignore_errors=True)

    def resolved(self, args):
        r = cli.attnlab(["train"] + args + cli.overrides(train__steps=2, run__out_dir="out"), self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.tmp, "out", "default", "config.toml"), "rb") as f:
            return tomllib.load(f)

    def test_array_value_with_commas_is_one_override(self):
        config = self.resolved(["optim.betas=[0.8,0.98]"])
        self.assertEqual(config["optim"]["betas"], [0.8, 0.98])

    def test_config_file_and_overrides_together(self):
        path = os.path.join(self.tmp, "a,b.toml")  # a comma in the file name too
        with open(path, "w") as f:
            f.write("[model]\nheads = 2\n")
        config = self.resolved([path, "model.kv_heads=1"])
        self.assertEqual((config["model"]["heads"], config["model"]["kv_heads"]), (2, 1))


if __name__ == "__main__":
    cli.main()
