"""How the tools write their files, as attnlab's commands do (experiments/files/output_file.h):
under a temporary name of this process's own beside the file, <name>.<pid>.<random>.tmp,
removed on any failure (and on SIGINT; report.py turns SIGTERM and SIGHUP into it),
then renamed, so that nothing is half-written and two writers never share a temporary.

write_output: a command's output (`attnlab report --out`). A new file is linked into
place, which never replaces one another process made meanwhile; an existing one
replaces only the file seen when --out was checked, under the folder's flock (which
attnlab's commands take too). Either refusal raises OutputKept, the other's file kept.

save_figure: a figure in a folder of figures (--png DIR, --out-dir): the last writer
of one name wins, whole.
"""
import fcntl
import os
import tempfile


class OutputKept(Exception):
    """Another process made or replaced the output while this one wrote it: nothing was written."""


def file_id(path):
    """What `path` names now (a link itself, not its target): (st_dev, st_ino), or None."""
    try:
        s = os.lstat(path)
    except FileNotFoundError:
        return None
    return s.st_dev, s.st_ino


def _temporary(path, write):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{os.path.basename(path)}.{os.getpid()}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
    except BaseException:
        _remove(tmp)
        raise
    return folder, tmp


def _remove(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sync_folder(folder):
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_output(path, write, seen):
    """`write(tmp)` fills the temporary; then it becomes `path`: a new file when `seen`
    is None, else in place of the file whose file_id was `seen` and of no other."""
    folder, tmp = _temporary(path, write)
    try:
        kept = f"--out {path} was %s by another process while this one ran; it is kept and nothing was written (give another name)"
        lock = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            now = file_id(path)
            if now is not None and now != seen:
                raise OutputKept(kept % ("created" if seen is None else "replaced"))
            if now is None:
                try:
                    os.link(tmp, path)  # never replaces
                except FileExistsError:
                    raise OutputKept(kept % "created") from None
            else:
                os.replace(tmp, path)
        finally:
            os.close(lock)
    finally:
        _remove(tmp)
    _sync_folder(folder)


def save_figure(fig, path, **options):
    """fig.savefig(path, **options) through a temporary, renamed over `path`."""
    fmt = options.pop("format", os.path.splitext(path)[1].lstrip(".") or "png")
    folder, tmp = _temporary(path, lambda tmp: fig.savefig(tmp, format=fmt, **options))
    try:
        os.replace(tmp, path)
    finally:
        _remove(tmp)
