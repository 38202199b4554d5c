"""The module's arguments, checked once per kind before anything runs or is
written: token ids, lengths, hook point names, hook functions, paths and
options. A value of the wrong type raises TypeError, a value out of range
ValueError; both name the argument and the item ("tokens[1][2]: 3.0 (float) is
not a token id"). Accepted arrays: Python sequences, numpy arrays and torch
tensors (without importing torch: a tensor is read through its own .numpy()).
"""
import os

import numpy as np

_SEQUENCES = (list, tuple, range)
_INT32 = np.dtype(np.int32)


def describe(value, limit=40):
    """A value as a message quotes it: a prefix of its repr, and its type."""
    text = repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return f"{text} ({type(value).__name__})"


def _is_torch(value):
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def as_numpy(value):
    """A torch tensor as a numpy array (a copy off the GPU, none on the CPU); anything else as it is."""
    if type(value) is np.ndarray:  # the common case first: every call's tokens pass here
        return value
    return value.detach().cpu().numpy() if _is_torch(value) else value


def _integer_array(array, what):
    if array.dtype.kind not in "iu":  # signed or unsigned integers; not bool, float, str or object
        raise TypeError(f"{what}: expected integers, got an array of dtype {array.dtype}")
    return array


def _id(item):
    """An integer as a Python int, or None: a Python or numpy integer or a 0-d
    integer array or tensor; never a bool (True is not token 1), float or str."""
    if isinstance(item, (bool, np.bool_)):
        return None
    if isinstance(item, (int, np.integer)):
        return int(item)
    item = as_numpy(item)
    if isinstance(item, np.ndarray) and item.ndim == 0 and item.dtype.kind in "iu":
        return int(item)
    return None


def _is_sequence(value):
    value = as_numpy(value)
    return isinstance(value, _SEQUENCES) or (isinstance(value, np.ndarray) and value.ndim > 0)


def _check_range(ids, what, vocab, noun):
    """ids: a non-empty integer array of any integer dtype (uint64 included). An
    int32 array of token ids goes to the engine as it is, which checks it against
    the vocabulary with this message (two reductions less on the call's path)."""
    if ids.dtype is _INT32 and vocab is not None:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0:
        raise ValueError(f"{what}: {noun} {low} is " +
                         (f"outside the vocabulary [0, {vocab})" if vocab is not None else "negative"))
    if vocab is not None and high >= vocab:
        raise ValueError(f"{what}: {noun} {high} is outside the vocabulary [0, {vocab})")


def _row(value, what, vocab, noun="token"):
    """One sequence of ids as an integer array (T,): a sequence of integers or a
    1-D integer array or tensor, every id in [0, vocab)."""
    value = as_numpy(value)
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise ValueError(f"{what}: expected one sequence of {noun}s, got an array of {value.ndim} axes")
        ids = _integer_array(value, what)
    elif isinstance(value, _SEQUENCES):
        items = []
        for i, item in enumerate(value):
            id = _id(item)
            if id is None:
                raise TypeError(f"{what}[{i}]: {describe(item)} is not a {noun} id (an integer)" if noun == "token" else
                                f"{what}[{i}]: {describe(item)} is not a {noun} (an integer)")
            items.append(min(max(id, -2 ** 63), 2 ** 63 - 1))  # beyond int64: still out of the vocabulary
        ids = np.array(items, dtype=np.int64)
    else:
        raise TypeError(f"{what}: expected a sequence of {noun}s, got {describe(value)}")
    if ids.size == 0:
        raise ValueError(f"{what}: an empty sequence")
    _check_range(ids, what, vocab, noun)
    return ids


def token_rows(value, what, vocab=None):
    """(integer array (B, T), each row's length or None when every row is full)
    from one sequence of ids, a list of sequences (right-padded with 0), or a 1-D
    or 2-D integer array or tensor. Every id an integer in [0, vocab)."""
    value = as_numpy(value)
    if isinstance(value, np.ndarray) and value.ndim == 2:
        array = _integer_array(value, what)
        if array.size == 0:
            raise ValueError(f"{what}: empty ({array.shape[0]} x {array.shape[1]})")
        _check_range(array, what, vocab, "token")
        return array, None
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise ValueError(f"{what}: expected one sequence or a (batch, positions) array, got {value.ndim} axes")
    if not isinstance(value, (np.ndarray,) + _SEQUENCES):
        raise TypeError(f"{what}: expected token ids, a list of sequences"
                        f"{', an integer array or tensor, or text' if what in ('tokens', 'src') else ' or an integer array or tensor'}; "
                        f"got {describe(value)}")
    if isinstance(value, np.ndarray) or not any(_is_sequence(v) for v in value):  # one sequence
        return _row(value, what, vocab)[None, :], None
    rows = []
    for i, item in enumerate(value):
        if not _is_sequence(item):
            raise TypeError(f"{what}[{i}]: {describe(item)} is not a sequence of token ids like the other rows")
        rows.append(_row(item, f"{what}[{i}]", vocab))
    width = max(len(r) for r in rows)
    array = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        array[i, :len(r)] = r
    return array, None if all(len(r) == width for r in rows) else [len(r) for r in rows]


def sequence(value, what, noun="token"):
    """One sequence of integers >= 0 (token ids, positions) as a list of ints,
    for the CLI's options: a list, a 1-D array or tensor, or a (1, T) one."""
    value = as_numpy(value)
    if isinstance(value, np.ndarray) and value.ndim == 2 and value.shape[0] == 1:
        value = value[0]
    if isinstance(value, (list, tuple)) and len(value) == 1 and _is_sequence(value[0]):
        value = value[0]
    return [int(i) for i in _row(value, what, None, noun)]


def lengths(value, what, rows, width):
    """Each sequence's length: None (every row full), or B integers in [1, width]."""
    if value is None:
        return None
    value = as_numpy(value)
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.dtype.kind not in "iu":
            raise TypeError(f"{what}: expected a list of integers, got an array of dtype {value.dtype} with {value.ndim} axes")
        items = [int(n) for n in value]
    elif isinstance(value, _SEQUENCES):
        for i, n in enumerate(value):
            if _id(n) is None:
                raise TypeError(f"{what}[{i}]: {describe(n)} is not a length (an integer)")
        items = [_id(n) for n in value]
    else:
        raise TypeError(f"{what}: expected a list of integers, one per sequence, got {describe(value)}")
    if len(items) != rows:
        raise ValueError(f"{what}: {len(items)} lengths for {rows} sequences")
    for n in items:
        if not 1 <= n <= width:
            raise ValueError(f"{what}: {n} is not in [1, {width}]")
    return items


def names(value, what, default):
    """Hook point names or globs: a name, a comma-separated string of them or a
    sequence of names; `default` for None."""
    if value is None:
        return list(default)
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, (list, tuple)):
        items = list(value)
        for i, item in enumerate(items):
            if not isinstance(item, str):
                raise TypeError(f"{what}[{i}]: {describe(item)} is not a hook point name (a string)")
    else:
        raise TypeError(f"{what}: expected a hook point name or glob, a comma-separated string or a list of them; "
                        f"got {describe(value)}")
    for item in items:
        if not item:
            raise ValueError(f"{what}: an empty name in {value!r}")
    return items


def hook_functions(value, what="hooks"):
    """{pattern: fn(activation, name)} as a list of pairs."""
    if not isinstance(value, dict):
        raise TypeError(f"{what}: expected a dict {{hook point pattern: function}}, got {describe(value)}")
    for pattern, fn in value.items():
        if not isinstance(pattern, str) or not pattern:
            raise TypeError(f"{what}: the key {describe(pattern)} is not a hook point name or glob (a non-empty string)")
        if not callable(fn):
            raise TypeError(f"{what}[{pattern!r}]: {describe(fn)} is not callable (a function fn(activation, name))")
    return list(value.items())


def path(value, what):
    """A file or folder path (str or os.PathLike) as a str."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{what}: expected a path (str or os.PathLike), got {describe(value)}")
    text = os.fspath(value)
    if not isinstance(text, str) or not text:
        raise ValueError(f"{what}: expected a non-empty path, got {value!r}")
    return text


def text(value, what):
    if not isinstance(value, str):
        raise TypeError(f"{what}: expected a str, got {describe(value)}")
    return value


def real_array(value, what):
    """An array of real numbers (integers or floats; not bools, strings or objects)."""
    value = as_numpy(value)
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as e:  # ragged nested lists
        raise TypeError(f"{what}: expected an array of numbers, got {describe(value)} ({e})") from None
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{what}: expected an array of numbers, got " +
                        (describe(value) if array.dtype.kind == "O" else f"dtype {array.dtype}"))
    return array
