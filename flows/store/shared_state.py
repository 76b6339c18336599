"""An engine's state shared by the Dask workers of one machine through files they all map.

Broadcast, an engine's state is copied into every worker: at 10M HMDA records the pricing,
lenders and regression states hold 0.5-0.7 GB each (one array per staged column the engine
reads), so two workers held it twice and eight would hold it eight times. Shared, the state's
large numpy arrays are written once to files (``.npy``, under the run's spool folder) and every
process maps them read-only (``np.load(mmap_mode="r")``): the kernel keeps one copy of their
pages in its page cache, however many workers read them, and may drop them under memory
pressure and read them again. A worker's resident memory (RSS) counts the pages it has touched;
its proportional share (PSS) divides each page among the processes that map it, which is what
the bench's memory figures sum.

:func:`share` writes the arrays and the rest of the state (a small pickle of the state's
structure whose large arrays are references to their files) and returns the state as the
workers will see it, mapped, and a :class:`SharedState`, the few bytes a piece's task carries.
An array already mapped from one of those files (the state of a second round, which keeps the
first's arrays) is not written again. The arrays are read-only: an engine writing into its state
from a piece would fail loudly instead of changing one worker's copy only.
"""
from __future__ import annotations

import io
import pickle
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# a state holding more array bytes than this is shared through files, not broadcast
SHARE_ABOVE = 64 * 2 ** 20
# arrays of at least this many bytes go to files of their own; smaller ones stay in the pickle
FILE_ARRAY_BYTES = 1 * 2 ** 20

_LOADED: dict[str, Any] = {}  # this process's mapped state, by the path of its structure
# every array this process has mapped from a state's file and still holds, by the file's path:
# a state that refers to the same files again (an engine's next round, whose state keeps the
# first round's arrays) gets the same arrays, not a second map of them. The process that
# prepared a state holds the first round's while its pieces load the second's, and a file mapped
# twice counts its pages twice in the process's RSS (0.4 GB at 10M HMDA records)
_MAPPED: weakref.WeakValueDictionary[str, np.ndarray] = weakref.WeakValueDictionary()


@dataclass(frozen=True)
class SharedState:
    """Where a shared state's structure is (its arrays are files beside it)."""

    path: str

    def load(self) -> Any:
        """The state, its large arrays mapped read-only from their files: read once per process
        and kept until another state is loaded or :func:`forget` is called."""
        got = _LOADED.get(self.path)
        if got is None:
            _LOADED.clear()  # one engine's state at a time
            with open(self.path, "rb") as fh:
                got = _LOADED[self.path] = _Loader(fh).load()
        return got


def share(state: Any, folder: Path) -> tuple[Any, SharedState]:
    """Write ``state`` to ``folder`` (its arrays of at least ``FILE_ARRAY_BYTES`` as ``.npy``
    files, the rest pickled) and return it as loaded from there (every such array mapped
    read-only) with its :class:`SharedState`: the one it was loaded from, if it was (nothing
    written again)."""
    for path, loaded in _LOADED.items():
        if loaded is state:
            return state, SharedState(path)
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    _Writer(buffer, folder).dump(state)
    path = folder / f"state-{uuid.uuid4().hex[:12]}.pkl"
    path.write_bytes(buffer.getvalue())
    handle = SharedState(str(path))
    return handle.load(), handle


def forget() -> None:
    """Let go of this process's mapped state (its pages stay with the kernel's cache only as
    long as its files exist)."""
    _LOADED.clear()


def _mapped_file(array: np.ndarray) -> str | None:
    """The ``.npy`` file ``array`` is the whole of, mapped read-only by :func:`np.load`, if it is."""
    base = array
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base  # (the base of an array over Arrow's memory is an Arrow object)
    if not isinstance(base, np.memmap) or base.filename is None or base.shape != array.shape or base.dtype != array.dtype \
            or base.ctypes.data != array.ctypes.data or not array.flags.c_contiguous:
        return None
    return str(base.filename)


class _Writer(pickle.Pickler):
    def __init__(self, fh, folder: Path):
        super().__init__(fh, protocol=pickle.HIGHEST_PROTOCOL)
        self.folder = folder
        self.done: dict[int, tuple[np.ndarray, str]] = {}  # id -> (the array, kept alive; its file)

    def persistent_id(self, obj):
        if type(obj) is not np.ndarray or obj.nbytes < max(FILE_ARRAY_BYTES, 1) or obj.dtype.hasobject:
            return None
        if id(obj) in self.done:  # one array met twice: one file
            return ("npy", self.done[id(obj)][1])
        path = _mapped_file(obj)
        if path is None or not path.endswith(".npy"):
            path = str(self.folder / f"array-{uuid.uuid4().hex[:12]}.npy")
            np.save(path, obj, allow_pickle=False)
        self.done[id(obj)] = (obj, path)
        return ("npy", path)


class _Loader(pickle.Unpickler):
    def __init__(self, fh):
        super().__init__(fh)
        self.maps: dict[str, np.ndarray] = {}

    def persistent_load(self, pid):
        kind, path = pid
        if kind != "npy":
            raise pickle.UnpicklingError(f"unknown shared array reference {kind!r}")
        if path not in self.maps:  # a plain ndarray over the map (the memmap its base, the map with it)
            found = _MAPPED.get(path)
            if found is None:
                found = _MAPPED[path] = np.asarray(np.load(path, mmap_mode="r", allow_pickle=False))
            self.maps[path] = found
        return self.maps[path]
