"""Reading an HDF5 file attnlab did not just write, from Python: the same guard as
data/h5_probe.h in the C++ reader. libhdf5 1.10.8 crashes, loops forever or
allocates without bound on some crafted metadata (tests/fuzz/libhdf5_crashes/),
and h5py calls it in this process. So `probe(path)` first reads the whole file
(every attribute and dataset) in a forked child under a time and a memory limit;
a crash, a hang or a runaway allocation there becomes one line naming the file
(H5ProbeError), and the caller's process opens the file only after the child
read it through. A Python error in the child (a file that is not HDF5) is left
to the caller's own reader, which then meets it without crashing.

Environment, as for the C++ reader: ATTNLAB_H5_PROBE=0 skips the child (files you
trust), ATTNLAB_H5_PROBE_SECONDS sets the time limit (default 10 s, plus 1 s per
100 MB of file).
"""
import os
import resource
import signal
import time

import h5py

DEFAULT_SECONDS = 10.0
BYTES_PER_SECOND = 100e6
MEMORY_BASE = 4 << 30          # bytes the child may map beyond what it inherits
MEMORY_PER_FILE_BYTE = 8


class H5ProbeError(OSError):
    """The file crashed, hung or exhausted the child that read it first: one line
    naming it (an OSError, as h5py's own failures to open a file are)."""


def enabled():
    value = os.environ.get("ATTNLAB_H5_PROBE", "")
    if value in ("", "1"):
        return True
    if value == "0":
        return False
    raise H5ProbeError(f"ATTNLAB_H5_PROBE={value[:40]!r} must be 1 (read an HDF5 file in a child process first, "
                       "the default) or 0 (trusted files only)")


def time_limit(path):
    value = os.environ.get("ATTNLAB_H5_PROBE_SECONDS", "")
    seconds = DEFAULT_SECONDS
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = float("nan")
        if not 0 < seconds <= 1e6:
            raise H5ProbeError(f"ATTNLAB_H5_PROBE_SECONDS={value[:40]!r} is not a number of seconds in (0, 1e6]")
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    return seconds + size / BYTES_PER_SECOND, size


def h5_file(path, swmr):
    """The file opened read-only, as a SWMR reader (a run's metrics.h5 while it trains) or plainly."""
    return h5py.File(path, "r", libver="latest", swmr=True) if swmr else h5py.File(path, "r")


def open_file(path, swmr=False):
    """probe(path), then the file opened in this process (h5py's own OSError if it is no HDF5)."""
    probe(path, swmr)
    return h5_file(path, swmr)


def read_everything(path, swmr):
    """What any reader of the file may touch: every attribute and every dataset."""
    with h5_file(path, swmr) as f:
        def visit(_name, obj):
            for key in obj.attrs:
                obj.attrs[key]
            if isinstance(obj, h5py.Dataset):
                obj[()]
        visit("/", f)
        f.visititems(visit)


def mapped_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def probe(path, swmr=False):
    """Returns once a child read `path` through without crashing, hanging or
    running out of memory; else raises H5ProbeError naming the file."""
    if not enabled():
        return
    seconds, size = time_limit(path)
    limit = mapped_bytes() + MEMORY_BASE + MEMORY_PER_FILE_BYTE * size
    damaged = ": it is damaged or crafted"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, say how it went in one byte, leave without cleanup
        verdict = b"K"
        try:
            os.close(read_end)
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
                signal.signal(signum, signal.SIG_DFL)
            quiet = os.open(os.devnull, os.O_WRONLY)  # glibc's and libhdf5's own words on a crash: the parent says it
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
            read_everything(path, swmr)
        except MemoryError:
            verdict = b"M"
        except BaseException:  # noqa: BLE001: the caller's reader reports it
            verdict = b"E"
        os.write(write_end, verdict)
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + seconds
    status = None
    try:
        while status is None:
            done, wait_status = os.waitpid(pid, os.WNOHANG)
            if done:
                status = wait_status
            elif time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise H5ProbeError(f"{path}: libhdf5 did not finish reading this file within {seconds:.3g} s{damaged} "
                                   "(ATTNLAB_H5_PROBE_SECONDS sets the limit)")
            else:
                time.sleep(0.002)
        verdict = os.read(read_end, 1)
    finally:
        os.close(read_end)
        if status is None:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum == signal.SIGKILL:
            raise H5ProbeError(f"{path}: the process reading this file first was killed (SIGKILL; out of memory?)")
        raise H5ProbeError(f"{path}: libhdf5 crashed reading this file (signal {signal.Signals(signum).name}){damaged}")
    if verdict == b"M":
        raise H5ProbeError(f"{path}: reading this file needs more than {limit / 2**30:.1f} GiB of memory, the limit for "
                           f"a file attnlab did not write{damaged} (ATTNLAB_H5_PROBE=0 reads a file you trust "
                           "without the limit)")
    if verdict not in (b"K", b"E"):
        raise H5ProbeError(f"{path}: libhdf5 ended the process reading this file first (exit status "
                           f"{os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1}){damaged}")
