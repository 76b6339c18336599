"""Where the parts of the regression's passes run (``engines.regression.cells``: a pass cut into
up to 16 parts of whole cells, whose sums the driver adds in the parts' order): here one after
another, or on the workers of a Dask cluster, local or external, each worker holding its share
of the parts from the first pass to the last (a Dask actor, :class:`Holder`) and running it at
one call a pass. The sums do not depend on where the parts ran, only on the cut,
so a fit's result is the same bits with any number of workers: data parallelism with a fixed
reduction order (the parts' sums are added on the driver in their order, never on a worker).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


def shares(work: np.ndarray, workers: int) -> list[list[int]]:
    """The parts (``work``: an estimate of each one's cost) dealt to up to ``workers`` workers
    so that the busiest has little more than its share: the largest part first, each to the
    worker with the least work so far (Graham's LPT rule: at most 4/3 of the best possible
    busiest worker, and near it when the parts are many and small). Ties go to the earlier part
    and the earlier worker, so the deal is the same for the same work. Each worker's parts in
    their order, the workers in the order of their first part; none empty."""
    work = np.asarray(work, dtype=np.float64)
    k = len(work)
    w = max(1, min(workers, k))
    load = np.zeros(w)
    dealt: list[list[int]] = [[] for _ in range(w)]
    for part in np.argsort(-work, kind="stable"):
        j = int(np.argmin(load))
        dealt[j].append(int(part))
        load[j] += work[part]
    return sorted((sorted(d) for d in dealt), key=lambda d: d[0])


REBALANCE = 2  # the passes after which the parts are dealt again by their measured CPU seconds


def run_parts(fn, args: tuple, *parts) -> tuple[list, list[float]]:
    """``fn(part, *args)`` for each of ``parts`` in their order: one worker's share of a pass;
    with the CPU seconds of the thread that ran each."""
    out, seconds = [], []
    for part in parts:
        start = time.thread_time()
        out.append(fn(part, *args))
        seconds.append(time.thread_time() - start)
    return out, seconds


class Holder:
    """A worker's run of parts, kept there from the first pass to the last: a Dask actor
    (``Client.submit(..., actor=True)``), whose methods the driver calls on the worker that
    holds it straight over the worker's connection, with no task through the scheduler.
    ``parts``: the parts it holds, by their index."""

    def __init__(self) -> None:
        self.parts: dict = {}

    def hold(self, parts: dict) -> int:
        """Holds ``parts`` (index: part) beside those it has; the count it holds."""
        self.parts.update(parts)
        return len(self.parts)

    def drop(self, keys: list) -> int:
        """Lets the parts ``keys`` go; the count it holds."""
        for key in keys:
            del self.parts[key]
        return len(self.parts)

    def run(self, fn, args: tuple, keys: list) -> tuple[list, list[float]]:
        """:func:`run_parts` of its parts ``keys``, in that order."""
        return run_parts(fn, args, *(self.parts[key] for key in keys))


@dataclass
class Run:
    """A worker's share of the parts: the worker (None: here), its :class:`Holder` (an
    actor on a cluster), the parts' indices, and the actor's future (which keeps it, and the
    parts it holds, on its worker until the placement is let go)."""

    worker: str | None
    holder: object
    keys: list
    future: object = None


class Placement(list):
    """:meth:`Executor.place`'s: the :class:`Run` of each worker used, in the parts' order, with
    the parts (``parts``), the passes run over them and each part's CPU seconds so far."""

    def __init__(self, placed: list, parts: list):
        super().__init__(placed)
        self.parts = parts
        self.passes = 0
        self.part_cpu = np.zeros(len(parts))


class Executor:
    """Where the parts of a pass run (``cells.Cells.parts``): here one after another (``client``
    None), or on the workers of a Dask cluster (a ``distributed.Client``, its scheduler local or
    external). :meth:`place` deals the parts to the workers in shares of about equal work
    (:func:`shares`), and sends each share's parts once to a :class:`Holder` actor on its
    worker, which keeps them; :meth:`map` then calls each actor once a pass (:func:`run_parts`:
    its run's parts one after another, its arguments the pass's few parameters: 5 KB at HMDA's
    1M, against 30 KB of sums a part back) and returns every part's sums in the parts' order.
    The driver adds them in that order, so the result is the same bits with any number of
    workers. An actor's call goes from the driver to its worker and back, without the
    scheduler: a task a worker a pass (submitted to the scheduler, sent on to the worker, its
    end reported back, its result fetched, its key released) took 3-4 times the messages, and
    on 2 loaded cores about 4 times the wall time and 3 times the CPU seconds of the driver,
    the scheduler and the workers per pass. The calls are direct when the client connects to
    the workers directly (``Client(..., direct_to_workers=True)``, as ``aequum bench
    regression``'s) or runs on a worker (the audit's pieces' ``worker_client``); otherwise the
    scheduler passes them on. After ``REBALANCE`` passes the parts are dealt again by their
    measured CPU seconds (:func:`shares`; a part that changes worker is sent
    there from the driver, once): the estimate of rows + cells leaves a few per cent more work
    on one worker, which every pass waits for. ``workers``: the addresses of the workers to use
    (default every worker the scheduler has when :meth:`place` runs). Measured: ``seconds``,
    ``passes``: the wall time in :meth:`map` and its calls; ``tasks``: the calls to the
    workers; ``parts``: the parts placed; ``busiest``: the sum over passes of the CPU seconds
    of a pass's busiest worker (what the passes take on idle cores, less the messages),
    ``task_cpu`` of every worker's."""

    def __init__(self, client=None, workers: list[str] | None = None):
        self.client, self.workers = client, workers
        self.seconds, self.passes, self.tasks, self.parts = 0.0, 0, 0, 0
        self.busiest, self.task_cpu = 0.0, 0.0

    def place(self, parts: list) -> Placement:
        """The shares of :func:`shares`, each held by an actor on its worker (here: one run of
        every part)."""
        self.parts = len(parts)
        if self.client is None:
            holder = Holder()
            holder.hold(dict(enumerate(parts)))
            return Placement([Run(None, holder, list(range(len(parts))))], parts)
        client = self.client
        workers = sorted(self.workers or client.sync(client.scheduler.identity, n_workers=-1)["workers"])
        if not workers:
            raise RuntimeError("the Dask cluster has no worker")
        dealt = shares(np.array([part.n + len(part.lay.starts) for part in parts]), len(workers))
        with client.as_current():  # (the actors bound to this client, not a default one)
            futures = [client.submit(Holder, workers=[w], allow_other_workers=False, actor=True)
                       for w, _ in zip(workers, dealt)]
            actors = client.gather(futures)
        placed = Placement([Run(w, a, keys, f) for w, a, f, keys in zip(workers, actors, futures, dealt)], parts)
        for call in [run.holder.hold({k: parts[k] for k in run.keys}) for run in placed]:
            call.result()
        return placed

    def map(self, fn, placed: Placement, *args) -> list:
        """``fn(part, *args)`` of every part, in the parts' order."""
        start = time.perf_counter()
        calls = [run.holder.run(fn, args, run.keys) for run in placed]
        if self.client is not None:
            calls = [call.result() for call in calls]
            self.tasks += len(calls)
        out: list = [None] * len(placed.part_cpu)
        for run, (sums, seconds) in zip(placed, calls):
            for key, x, t in zip(run.keys, sums, seconds):
                out[key] = x
                placed.part_cpu[key] += t
        self.busiest += max(sum(ts) for _, ts in calls)
        self.task_cpu += sum(sum(ts) for _, ts in calls)
        placed.passes += 1
        self.seconds += time.perf_counter() - start
        self.passes += 1
        if self.client is not None and placed.passes == REBALANCE and len(placed) > 1:
            self._rebalance(placed)
        return out

    def release(self, placed: Placement) -> None:
        """Lets ``placed``'s actors, and the parts they hold, go on their workers now: the
        placement's references run in cycles (the fit's closures), which the garbage collector
        finds late, and each holds a fit's rows."""
        futures = [run.future for run in placed if run.future is not None]
        for run in placed:
            run.holder = run.future = None
        placed.parts = []
        if futures:
            self.client.cancel(futures)

    def _rebalance(self, placed: Placement) -> None:
        """``placed``'s parts dealt again by their measured CPU seconds (:func:`shares`), each
        new share to the worker already holding the most of its work: the parts a worker gains
        sent to its actor, those it loses let go there."""
        if not placed.part_cpu.sum() > 0:
            return
        cpu = placed.part_cpu
        left = list(range(len(placed)))
        given: dict[int, list[int]] = {}
        for keys in sorted(shares(cpu, len(placed)), key=lambda d: -cpu[d].sum()):
            held = [cpu[sorted(set(keys) & set(placed[r].keys))].sum() for r in left]
            given[left.pop(int(np.argmax(held)))] = keys
        calls = []
        for r, run in enumerate(placed):
            keys = given[r]
            gained, lost = sorted(set(keys) - set(run.keys)), sorted(set(run.keys) - set(keys))
            if gained:
                calls.append(run.holder.hold({k: placed.parts[k] for k in gained}))
            if lost:
                calls.append(run.holder.drop(lost))
            run.keys = keys
        for call in calls:
            call.result()
