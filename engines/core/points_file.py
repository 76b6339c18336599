"""Points kept in files and read back a range of records at a time.

CST searches the factual points of every record for each complainant's neighbours
(:func:`engines.core.knn.knn_in_blocks`, a block of records at a time). Held in memory, those
points are copied to every worker that runs a piece: 0.4 GB a worker at 10M HMDA records. A
:class:`PointsFile` holds only where they are; ``take`` reads the records asked for, 65,536
records of the files at a time, so a search holds one block of points, as it would in memory,
and nothing more. The files are plain arrays (``ndarray.tofile``), read with ``np.fromfile``
into fresh memory (no mapping stays in the process).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from aequum.engines.core.knn import Points

_CHUNK = 1 << 16  # records read at a time


@dataclass(frozen=True)
class _Array:
    path: str
    dtype: str
    width: int


@dataclass(frozen=True)
class PointsFile:
    """:class:`Points` in files: ``take`` and ``len`` as the points'."""

    n: int
    metric: _Array
    nominal: _Array
    codes: _Array | None
    steps: np.ndarray | None

    @classmethod
    def write(cls, points: Points, folder: Path) -> "PointsFile":
        folder.mkdir(parents=True, exist_ok=True)

        def save(name: str, array: np.ndarray) -> _Array:
            path = folder / f"{name}.bin"
            np.ascontiguousarray(array).tofile(path)
            return _Array(str(path), array.dtype.str, array.shape[1])

        codes = None if points.codes is None else save("codes", points.codes)
        return cls(len(points), save("metric", points.metric), save("nominal", points.nominal), codes,
                   points.steps)

    def __len__(self) -> int:
        return self.n

    def take(self, idx: np.ndarray) -> Points:
        """The points of records ``idx`` (any order, repeats allowed), as ``Points.take``."""
        idx = np.asarray(idx, np.int64)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.n):
            raise IndexError(f"record index out of range for {self.n} points")
        order = np.argsort(idx, kind="stable")
        wanted = idx[order]
        arrays = [self.metric, self.nominal] + ([self.codes] if self.codes is not None else [])
        out = [np.empty((len(idx), a.width), np.dtype(a.dtype)) for a in arrays]
        chunks = np.unique(wanted // _CHUNK)
        bounds = np.searchsorted(wanted, np.r_[chunks, chunks[-1] + 1] * _CHUNK) if len(chunks) else []
        for a, o in zip(arrays, out):
            if a.width == 0:
                continue
            dtype = np.dtype(a.dtype)
            with open(a.path, "rb") as f:
                for c, lo, hi in zip(chunks, bounds[:-1], bounds[1:]):
                    start = int(c) * _CHUNK
                    count = min(_CHUNK, self.n - start)
                    f.seek(start * a.width * dtype.itemsize)
                    block = np.fromfile(f, dtype, count * a.width).reshape(count, a.width)
                    o[order[lo:hi]] = block[wanted[lo:hi] - start]
        return Points(out[0], out[1], out[2] if self.codes is not None else None, self.steps)
