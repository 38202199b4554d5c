#!/usr/bin/python3
"""tools/output_files.py, the tools' side of experiments/files/output_file.h (issue 51,
part 7): `attnlab report --out` and the --png figures are written under a temporary
name of their own process; a new report never replaces a file another process made
meanwhile, an existing one replaces only the file seen at the check; nothing is left
behind on failure; two figure writers never share a temporary.

    /usr/bin/python3 tests/tools/test_output_files.py ATTNLAB_BINARY REPO_ROOT
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
import cli_common as cc  # noqa: E402


class OutputFiles(cc.TempDirTest):
    def setUp(self):
        super().setUp()
        sys.path.insert(0, os.path.join(cc.REPO_ROOT, "tools"))
        import output_files
        self.of = output_files

    def text(self, name):
        with open(self.path(name)) as f:
            return f.read()

    def writing(self, text, meanwhile=lambda: None):
        def write(tmp):
            self.assertRegex(os.path.basename(tmp), rf"^r\.html\.{os.getpid()}\.\w+\.tmp$")
            meanwhile()
            with open(tmp, "w") as f:
                f.write(text)
        return write

    def test_a_new_report_keeps_the_file_another_process_made(self):
        out = self.path("r.html")

        def theirs():
            with open(out, "w") as f:
                f.write("theirs")
        with self.assertRaisesRegex(self.of.OutputKept, r"r\.html was created by another process while this one ran; "
                                                        r"it is kept and nothing was written"):
            self.of.write_output(out, self.writing("mine", theirs), None)
        self.assertEqual(self.text("r.html"), "theirs")
        self.assertEqual(os.listdir(self.tmp), ["r.html"])

    def test_an_existing_report_is_replaced_only_if_it_is_the_one_seen(self):
        out = self.path("r.html")
        with open(out, "w") as f:
            f.write("old")
        seen = self.of.file_id(out)

        def replaced():
            self.of.write_output(out, self.writing("theirs"), self.of.file_id(out))
        with self.assertRaisesRegex(self.of.OutputKept, "was replaced by another process"):
            self.of.write_output(out, self.writing("mine", replaced), seen)
        self.assertEqual(self.text("r.html"), "theirs")
        self.of.write_output(out, self.writing("mine"), self.of.file_id(out))
        self.assertEqual(self.text("r.html"), "mine")
        self.assertEqual(os.listdir(self.tmp), ["r.html"])

    def test_a_failed_write_leaves_nothing(self):
        def fails(tmp):
            with open(tmp, "w") as f:
                f.write("half")
            raise KeyboardInterrupt
        with self.assertRaises(KeyboardInterrupt):
            self.of.write_output(self.path("r.html"), fails, None)
        self.assertEqual(os.listdir(self.tmp), [])

    def test_figures_go_through_a_temporary_of_their_own(self):
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        self.of.save_figure(fig, self.path("a.png"), dpi=50)
        plt.close(fig)
        self.assertEqual(os.listdir(self.tmp), ["a.png"])
        with open(self.path("a.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    cc.main()
