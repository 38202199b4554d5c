"""The binary finds its Python tools wherever it is, and the Python module imports from the installation: in an installation made by
`cmake --install BUILD --prefix PREFIX` (PREFIX/bin/attnlab with
PREFIX/share/attnlab/tools and configs), and as a copy far from the source tree
(a build folder outside it), where it falls back to the tree it was built from.

    /usr/bin/python3 tests/cli/test_install.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import shutil
import subprocess
import sys

import cli_common as cc


class Install(cc.TempDirTest):
    def train_tiny(self, binary):
        out = self.path("runs")
        r = subprocess.run([binary, "train"] + cc.overrides(**{"run.out_dir": out}), cwd=self.tmp, env=cc.env(),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return os.path.join(out, "default")

    def check_png(self, binary, run_dir):
        """inspect --png runs tools/plot_attention.py: the binary must find it."""
        env = {k: v for k, v in cc.env().items() if k != "ATTNLAB_TOOLS"}
        pngs = self.path("png")
        r = subprocess.run([binary, "inspect", run_dir, "--tokens", "3 4 5 1 3", "--out", self.path("i.h5"), "--png", pngs],
                           cwd=self.tmp, env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertTrue(any(name.endswith(".png") for name in os.listdir(pngs)), os.listdir(pngs))

    def test_cmake_install_gives_a_working_installation(self):
        build = os.path.dirname(cc.ATTNLAB)
        prefix = self.path("prefix with space")
        r = subprocess.run(["cmake", "--install", build, "--prefix", prefix], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        binary = os.path.join(prefix, "bin", "attnlab")
        for part in ("share/attnlab/tools/plot_attention.py", "share/attnlab/tools/report.py",
                     "share/attnlab/configs/recall.toml"):
            self.assertTrue(os.path.isfile(os.path.join(prefix, part)), part)
        r = subprocess.run([binary, "train", "--keys"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        run_dir = self.train_tiny(binary)
        self.check_png(binary, run_dir)
        # the Python module, when the build has it, installs into PREFIX's dist-packages and imports from there
        if os.path.isdir(os.path.join(build, "python", "attnlab")):
            packages = os.path.join(prefix, "lib", f"python3.{sys.version_info.minor}", "dist-packages")
            env = dict(cc.env(), PYTHONPATH=packages)
            r = subprocess.run(["/usr/bin/python3", "-c", "import sys, attnlab; m = attnlab.load(sys.argv[1]); "
                                "print(attnlab.__file__, m.run([3, 4, 5]).shape)", run_dir],
                               cwd=self.tmp, env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.startswith(packages), r.stdout)

    def test_a_binary_far_from_the_source_tree_finds_its_tools(self):
        elsewhere = self.path("elsewhere", "bin", "deep")
        os.makedirs(elsewhere)
        binary = os.path.join(elsewhere, "attnlab")
        shutil.copy2(cc.ATTNLAB, binary)
        self.check_png(binary, self.train_tiny(binary))


if __name__ == "__main__":
    cc.main()
