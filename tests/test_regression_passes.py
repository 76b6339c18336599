"""engines.regression.passes: where the logit's passes over parts run. The parts' sums are added
on the driver in their order, so where the parts run, on how many workers and in which order
they answer changes no bit; each worker keeps its share of the parts (an actor) from the first pass to
the last, and after ``REBALANCE`` passes the shares follow the parts' measured CPU seconds. A
stand-in client here; tests/test_regression_external.py runs the same on a real scheduler and
workers. No timing asserts."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
from test_regression_cells import _inputs, world

from aequum.engines.regression import cells, passes
from aequum.engines.regression.logit import controlled_logit
from aequum.engines.regression.sensitivity import controlled_lpm


class _Call:
    """An actor's call, run when any call's result is first asked: every pending call then
    runs, last to first, as workers may answer."""

    def __init__(self, client, fn, args):
        self.client, self.fn, self.args, self.done, self.value = client, fn, args, False, None
        client.pending.append(self)

    def result(self):
        while self.client.pending:
            call = self.client.pending.pop()
            call.value, call.done = call.fn(*call.args), True
        assert self.done
        return self.value


class _Actor:
    """A stand-in for a Dask actor: its methods' calls are :class:`_Call`; ``calls`` counts them."""

    def __init__(self, obj, client):
        self._obj, self._client, self.calls = obj, client, []

    def result(self):  # (the actor's future)
        return self

    def __getattr__(self, name):
        method = getattr(self._obj, name)

        def call(*args):
            self.calls.append(name)
            return _Call(self._client, method, args)
        return call


class _Client:
    """A stand-in for a Dask client of ``workers`` workers whose actors answer last to first."""

    def __init__(self, workers: int = 3):
        self.workers = {f"tcp://127.0.0.1:{9000 + i}": {} for i in range(workers)}
        self.scheduler = self
        self.pending: list[_Call] = []
        self.actors: list[_Actor] = []
        self.cancelled: list[_Actor] = []

    def identity(self, n_workers=0):
        return {"workers": self.workers}

    def sync(self, fn, **kw):
        return fn(**kw)

    @contextmanager
    def as_current(self):
        yield

    def submit(self, cls, *args, workers=None, allow_other_workers=True, actor=False):
        assert actor and len(workers) == 1 and workers[0] in self.workers and not allow_other_workers
        self.actors.append(_Actor(cls(*args), self))
        return self.actors[-1]

    def gather(self, futures):
        return [f.result() for f in futures]

    def cancel(self, futures):
        self.cancelled.extend(futures)


def test_parts_and_workers_change_no_bit(monkeypatch):
    """A pass cut into parts gives the one-part result to rounding; where the parts run (and in
    which order they answer) changes no bit: the driver adds them in their order. Each worker
    holds its run of parts from the first pass: one call a worker a pass, the parts sent once
    (and once more for those that change worker after ``REBALANCE`` passes)."""
    y, d, income, dti, purpose, lender, market, kind = world(seed=4, n=6000)
    kw = _inputs(y, d, income, dti, purpose, lender, market, kind)
    one, lpm_one = controlled_logit(y, d, **kw), controlled_lpm(y, d, **kw)
    monkeypatch.setattr(cells, "PART_ROWS", 300)
    here = controlled_logit(y, d, **kw)
    values = lambda f: (f.coefficient, f.se, f.ame, f.ame_se, f.log_likelihood, *f.coefficients["se"])  # noqa: E731
    for k in (1, 2, 3):
        client = _Client(k)
        executor = passes.Executor(client)
        there = controlled_logit(y, d, executor=executor, **kw)
        assert values(here) == values(there), k
        assert executor.parts == 16 and executor.passes > 2 and executor.tasks == executor.passes * k
        for actor in client.actors:
            runs = [c for c in actor.calls if c == "run"]
            assert len(runs) == executor.passes and actor.calls[0] == "hold"
            assert set(actor.calls) - {"run", "hold", "drop"} == set()
            assert actor.calls.count("hold") <= 2
        assert client.cancelled == [a for a in client.actors]  # the fit let its actors go
    lpm = controlled_lpm(y, d, **kw)
    assert np.allclose(values(here), values(one), rtol=1e-10, atol=0)
    assert lpm.estimate == pytest.approx(lpm_one.estimate, rel=1e-10) and lpm.se == pytest.approx(lpm_one.se, rel=1e-10)


def test_shares_of_parts_balanced_by_work():
    """The parts dealt to the workers largest first, each to the least loaded (ties to the
    earlier part and worker); every part dealt once, none of the shares empty, each in the
    parts' order; the busiest share never above 4/3 of the best deal (brute force)."""
    from itertools import product

    from aequum.engines.regression.passes import shares

    assert shares(np.full(16, 10), 1) == [list(range(16))]
    assert shares(np.full(16, 10), 2) == [list(range(0, 16, 2)), list(range(1, 16, 2))]
    assert shares(np.array([100, *[1] * 15]), 2) == [[0], list(range(1, 16))]
    assert shares(np.array([1] * 15 + [100]), 2) == [list(range(15)), [15]]
    assert shares(np.full(3, 10), 5) == [[0], [1], [2]]
    assert shares(np.array([5, 4, 3, 3, 3]), 2) == [[0, 3], [1, 2, 4]]  # 8 and 10; best 9
    rng = np.random.default_rng(3)
    for _ in range(200):
        k, w = int(rng.integers(1, 9)), int(rng.integers(1, 4))
        work = rng.integers(1, 50, k).astype(float)
        dealt = shares(work, w)
        assert sorted(p for d in dealt for p in d) == list(range(k)) and all(dealt)
        assert all(d == sorted(d) for d in dealt) and [d[0] for d in dealt] == sorted(d[0] for d in dealt)
        best = min(max(work[[p for p in range(k) if a[p] == j]].sum() for j in range(w))
                   for a in product(range(w), repeat=k))
        assert max(work[d].sum() for d in dealt) <= best * 4 / 3 + 1e-9


class _Part:
    def __init__(self, i):
        self.i, self.n = i, 100
        self.lay = type("Lay", (), {"starts": np.zeros(10)})()


def test_parts_dealt_again_by_measured_cpu():
    """After ``REBALANCE`` passes the parts are dealt again by their measured CPU seconds, each
    new share to the worker holding most of its work; a part that changes worker is sent to its
    new worker and let go on its old one."""
    client = _Client(2)
    executor = passes.Executor(client)
    placed = executor.place([_Part(i) for i in range(4)])
    held = lambda: [sorted(a._obj.parts) for a in client.actors]  # noqa: E731
    assert [run.keys for run in placed] == [[0, 2], [1, 3]] and held() == [[0, 2], [1, 3]]
    placed.part_cpu[:] = [1.0, 1.0, 1.0, 3.0]  # the last part three times the others' work
    workers = [run.worker for run in placed]
    executor._rebalance(placed)
    assert [run.worker for run in placed] == workers and [run.keys for run in placed] == [[0, 1, 2], [3]]
    assert held() == [[0, 1, 2], [3]]
    assert client.actors[0]._obj.parts[1] is placed.parts[1]
    placed.part_cpu[:] = [3.0, 1.0, 1.0, 1.0]  # now the first: the worker holding it keeps it
    executor._rebalance(placed)
    assert [run.keys for run in placed] == [[0], [1, 2, 3]] and held() == [[0], [1, 2, 3]]


def test_rebalanced_once_after_rebalance_passes():
    """The passes' order of the parts' sums is kept through the deal again, which happens once,
    after ``REBALANCE`` passes, by the CPU seconds the workers measured."""
    client = _Client(2)
    executor = passes.Executor(client)
    placed = executor.place([_Part(i) for i in range(6)])
    found = [executor.map(lambda part, scale: part.i * scale, placed, s) for s in range(1, 6)]
    assert found == [[i * s for i in range(6)] for s in range(1, 6)]
    assert placed.passes == executor.passes == 5 and executor.tasks == 10
    for actor in client.actors:  # parts moved, if at all, between the second pass and the third
        runs = [i for i, c in enumerate(actor.calls) if c == "run"]
        moved = [i for i, c in enumerate(actor.calls[1:], start=1) if c != "run"]
        assert len(runs) == 5 and all(runs[1] < i < runs[2] for i in moved) and len(moved) <= 2


def test_here_without_a_client():
    """Without a client the parts run here, one after another, in their order."""
    executor = passes.Executor()
    placed = executor.place([_Part(i) for i in range(5)])
    assert len(placed) == 1 and placed[0].worker is None
    assert executor.map(lambda part: part.i, placed) == list(range(5))
    assert executor.tasks == 0 and executor.passes == 1 and placed.part_cpu.shape == (5,)
