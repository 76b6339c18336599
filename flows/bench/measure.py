"""What every benchmark measures the same way."""
from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
import time
from contextlib import contextmanager


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB (VmHWM: reset at exec, unlike getrusage's
    ru_maxrss, which a child started by fork + exec inherits from its parent)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def in_fresh_process(module: str, fn: str, *args: str, env: dict | None = None, show: bool = False) -> dict:
    """``module.fn(*args)`` in a fresh Python process, so that its peak memory is its own; its
    result (JSON) is read from the line it prints marked ``RESULT``, whatever else it prints.
    ``show``: the process's standard error (its log and progress lines) goes on to this one's
    as it comes. A failure raises RuntimeError naming the step, with the end of the process's
    error output."""
    code = f"import json, {module} as m; print('RESULT ' + json.dumps(m.{fn}(*{list(args)!r})))"
    if show:
        returncode, stdout, stderr = _shown(code, env)
    else:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        returncode, stdout, stderr = out.returncode, out.stdout, out.stderr
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if returncode or not lines:
        raise RuntimeError(f"{fn}{args!r} failed (exit status {returncode}):\n{stderr.strip()[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _shown(code: str, env: dict | None) -> tuple[int, str, str]:
    """Run ``code``, its standard error copied to this process's as it comes (and its last
    lines kept for an error message)."""
    import collections

    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    tail: collections.deque[str] = collections.deque(maxlen=200)

    def copy() -> None:
        for line in proc.stderr:
            tail.append(line)
            sys.stderr.write(line)
            sys.stderr.flush()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    stdout = proc.stdout.read()
    returncode = proc.wait()
    thread.join()
    return returncode, stdout, "".join(tail)


def every(seconds: float):
    """A progress callable printing a line to standard error at most every ``seconds``."""
    last = [time.monotonic()]

    def say(line: str) -> None:
        if time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            print(f"  {line}", file=sys.stderr, flush=True)

    return say


ROLE_ORDER = ("flow", "dask worker", "dask fork server", "prefect api", "model child", "other")


def process_roles(me, workers: dict[int, int]) -> dict:
    """This process and its descendants by role: ``flow`` (this process), ``dask worker N``
    (the pids of ``workers``: pid -> rank), ``dask fork server`` (the process the workers are
    forked from), ``prefect api`` (the temporary API's uvicorn),
    ``model child`` (another spawned Python process of this one: ``flows.child_process``),
    ``other`` (the rest, e.g. multiprocessing's resource tracker). psutil.Process -> role."""
    import psutil

    out = {me: "flow"}
    for p in me.children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:  # exited between the listing and the reading
            continue
        if p.pid in workers:
            out[p] = f"dask worker {workers[p.pid]}"
        elif "multiprocessing.forkserver" in cmd:  # (Dask's multiprocessing-method forkserver)
            out[p] = "dask fork server"
        elif "uvicorn" in cmd and "prefect" in cmd:
            out[p] = "prefect api"
        elif "resource_tracker" not in cmd and ("spawn_main" in cmd or "multiprocessing" in cmd):
            out[p] = "model child"
        else:
            out[p] = "other"
    return out


def dask_worker_pids() -> dict[int, int]:
    """The pids of the Dask worker processes that this process's nannies (a LocalCluster's)
    run, each with its rank (1, 2, ...) among the running ones in the nannies' order: a renewed
    worker takes the rank of the one it replaced. Empty when Dask is not imported."""
    if "distributed" not in sys.modules:
        return {}
    from distributed import Nanny

    try:
        nannies = list(Nanny._instances)  # a WeakSet the cluster's event loop changes
    except RuntimeError:
        return {}
    pids = []
    for n in nannies:
        pid = getattr(n, "pid", None)
        if pid:
            pids.append((str(n.name).zfill(6), pid))
    return {pid: rank for rank, (_, pid) in enumerate(sorted(pids), start=1)}


class TreePeak:
    """The memory of this process and all its descendants while in the block, by role
    (:func:`process_roles`: the flow, each Dask worker, the Prefect API, the model's child)
    and by phase of the run (:meth:`mark`; :meth:`follow_audit` marks an audit's): what the
    machine must hold for an audit, where ``peak_rss_mb`` sees one process.

    Resident memory (RSS) is read every ``interval`` seconds. RSS counts a shared page (a
    library's code: libtorch, which every worker maps, 0.2-0.3 GB) once in each process that
    maps it, so the sum over processes overstates what they hold together; the proportional set
    size (PSS: each shared page divided among the processes mapping it) sums to it. PSS is read
    from ``/proc/PID/smaps_rollup``, which walks the process's page tables (15-35 ms of CPU for
    a 2-4 GB process), so it is read at most as often as ``pss_share`` of one core allows
    (:meth:`_pss_round`), and a process's PSS between two reads is its RSS less its RSS - PSS
    at its last read (shared pages change little).

    After the block: ``peak_mb`` / ``peak_pss_mb`` (peaks of the sums), ``peak_phase`` /
    ``peak_pss_phase`` and ``peak_at`` (seconds from the start); ``roles``: per role its peak
    RSS and PSS and the phase of its RSS peak; ``phases``: per phase the peaks of the sums and
    of each role; ``sampling``: samples, PSS rounds and the sampler's own CPU seconds; ``cpu``:
    the processes' CPU seconds (user + system) by role and by phase, each sample's increase
    counted in the phase it ends in (a process's last half second before it exits is not seen;
    while two engines run at once, the phase is the one that started last)."""

    def __init__(self, interval: float = 0.5, pss_share: float = 0.01, workers=dask_worker_pids):
        self.interval, self.pss_share, self.workers = interval, pss_share, workers
        self.peak_mb = self.peak_pss_mb = self.peak_at = 0.0
        self.peak_phase = self.peak_pss_phase = ""
        self.roles: dict[str, dict] = {}
        self.phases: dict[str, dict] = {}
        self.sampling = {"samples": 0, "pss_rounds": 0, "cpu_s": 0.0}
        self.phase = "start-up"
        self._shared: dict[int, float] = {}  # pid -> RSS - PSS (MB) at its last PSS read
        self._cpu_seen: dict[int, float] = {}  # pid -> its CPU seconds at the last sample
        self.cpu_roles: dict[str, float] = {}
        self.cpu_phases: dict[str, dict[str, float]] = {}
        self._stop, self._lock, self._t0 = None, threading.Lock(), time.monotonic()

    def mark(self, phase: str) -> None:
        """The run is in ``phase`` from now on (e.g. ``engine regression``); a sample of its
        start is taken at once (a phase shorter than the interval is seen too)."""
        import psutil

        with self._lock:
            self.phase = phase
            if self._stop is not None and not self._stop.is_set():
                self._record(process_roles(psutil.Process(), self.workers()), time.monotonic() - self._t0)

    def _pss_round(self, procs) -> None:
        import psutil

        for p in procs:
            try:
                full = p.memory_full_info()  # (a page that came between its two reads: not shared)
                self._shared[p.pid] = max(full.rss - full.pss, 0) / 2 ** 20
            except psutil.Error:
                continue

    def _sample(self) -> None:
        import psutil

        me, next_pss = psutil.Process(), 0.0
        while not self._stop.wait(self.interval):
            c0 = time.thread_time()
            roles = process_roles(me, self.workers())
            new = [p for p in roles if p.pid not in self._shared]
            if time.monotonic() >= next_pss:
                p0 = time.thread_time()
                self._pss_round(list(roles))
                self.sampling["pss_rounds"] += 1
                next_pss = time.monotonic() + max(self.interval, (time.thread_time() - p0) / self.pss_share)
            elif new:
                self._pss_round(new)  # a new process (a renewed worker): small, read at once
            with self._lock:
                self._record(roles, time.monotonic() - self._t0)
            self.sampling["samples"] += 1
            self.sampling["cpu_s"] += time.thread_time() - c0

    def _record(self, roles: dict, at: float) -> None:
        import psutil

        by_role: dict[str, list[float]] = {}
        cpu_phase = self.cpu_phases.setdefault(self.phase, {})
        for p, role in roles.items():
            try:
                rss = p.memory_info().rss / 2 ** 20
                times = p.cpu_times()
            except psutil.Error:
                continue
            used = times.user + times.system
            spent = max(used - self._cpu_seen.get(p.pid, 0.0), 0.0)
            self._cpu_seen[p.pid] = used
            self.cpu_roles[role.rstrip("0123456789 ")] = self.cpu_roles.get(role.rstrip("0123456789 "), 0.0) + spent
            cpu_phase[role] = cpu_phase.get(role, 0.0) + spent
            pss = max(rss - self._shared.get(p.pid, 0.0), 0.0)
            got = by_role.setdefault(role, [0.0, 0.0])
            got[0] += rss
            got[1] += pss
        rss_sum, pss_sum = sum(v[0] for v in by_role.values()), sum(v[1] for v in by_role.values())
        phase = self.phases.setdefault(self.phase, {"rss_mb": 0.0, "pss_mb": 0.0, "roles": {}})
        phase["rss_mb"], phase["pss_mb"] = max(phase["rss_mb"], rss_sum), max(phase["pss_mb"], pss_sum)
        for role, (rss, pss) in by_role.items():
            peak = self.roles.setdefault(role, {"rss_mb": 0.0, "pss_mb": 0.0, "rss_phase": ""})
            if rss > peak["rss_mb"]:
                peak["rss_mb"], peak["rss_phase"] = rss, self.phase
            peak["pss_mb"] = max(peak["pss_mb"], pss)
            in_phase = phase["roles"].setdefault(role, {"rss_mb": 0.0, "pss_mb": 0.0})
            in_phase["rss_mb"], in_phase["pss_mb"] = max(in_phase["rss_mb"], rss), max(in_phase["pss_mb"], pss)
        if rss_sum > self.peak_mb:
            self.peak_mb, self.peak_phase, self.peak_at = rss_sum, self.phase, at
        if pss_sum > self.peak_pss_mb:
            self.peak_pss_mb, self.peak_pss_phase = pss_sum, self.phase

    def figures(self) -> dict:
        """The measurements as a JSON-able dict (MB, seconds)."""
        order = {r: i for i, r in enumerate(ROLE_ORDER)}
        roles = dict(sorted(self.roles.items(), key=lambda kv: (order.get(kv[0].rstrip("0123456789 "), 9), kv[0])))
        return {"peak_mb": self.peak_mb, "peak_pss_mb": self.peak_pss_mb, "peak_phase": self.peak_phase,
                "peak_pss_phase": self.peak_pss_phase, "peak_at_s": self.peak_at, "roles": roles,
                "phases": self.phases, "sampling": self.sampling,
                "cpu": {"total_s": sum(self.cpu_roles.values()), "roles": self.cpu_roles, "phases": self.cpu_phases}}

    @contextmanager
    def follow_audit(self):
        """Mark an audit's phases as its flow (run in this process) goes, by the flow's steps
        (``flows.audit``'s ``stage``, ``prepare_model``, ``renew_workers``, ``score_run``,
        ``write_run``, wrapped while in the block) and by its engines' progress events (``engine
        NAME`` from the first, which the engine sends when it holds the run's lock:
        ``flows.progress.watching``); ``closing`` after the flow."""
        from unittest.mock import patch

        from aequum.flows import audit, progress

        def marking(fn, phase: str):
            @functools.wraps(fn)
            def step(*args, **kwargs):
                self.mark(phase)
                return fn(*args, **kwargs)
            return step

        def engine(name: str, done: int, total: int | None) -> None:
            if name != self.phase and (total is None or done < total):  # not an earlier engine's last event
                self.mark(name)

        steps = {"stage": "staging", "prepare_model": "model", "renew_workers": "renewing workers",
                 "score_run": "scoring against the truth", "write_run": "writing the results"}
        try:
            with patch.multiple(audit, **{fn: marking(getattr(audit, fn), phase) for fn, phase in steps.items()}), \
                    progress.watching(engine):
                yield self
        finally:
            self.mark("closing")

    def __enter__(self) -> "TreePeak":
        self._stop, self._t0 = threading.Event(), time.monotonic()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def memory_lines(e2e: dict) -> list[str]:
    """The peak memory of an audit's processes (``measure_audit``'s ``memory``) as lines."""
    m = e2e.get("memory")
    if not m:
        return []
    gb = 1 / 1024
    roles = ", ".join(f"{r} {v['rss_mb'] * gb:.2f} / {v['pss_mb'] * gb:.2f} GB ({v['rss_phase']})"
                      for r, v in m["roles"].items())
    phases = ", ".join(f"{p} {v['rss_mb'] * gb:.2f} / {v['pss_mb'] * gb:.2f}" for p, v in m["phases"].items())
    return [f"  memory of every process: peak {m['peak_mb'] * gb:.2f} GB RSS / {m['peak_pss_mb'] * gb:.2f} GB PSS "
            f"during {m['peak_phase']} (at {m['peak_at_s']:.0f} s; PSS peak during {m['peak_pss_phase']})",
            f"  per process, peak RSS / PSS (when the RSS peaked): {roles}",
            f"  per phase, peak of the sum RSS / PSS (GB): {phases}",
            f"  (sampled {m['sampling']['samples']} times, PSS {m['sampling']['pss_rounds']} times, for "
            f"{m['sampling']['cpu_s']:.1f} CPU s)"] + cpu_lines(m.get("cpu"))


def cpu_lines(cpu: dict | None) -> list[str]:
    """The CPU seconds of an audit's processes (``TreePeak``'s ``cpu``) by role and by phase."""
    if not cpu:
        return []
    roles = ", ".join(f"{r} {s:.1f}" for r, s in sorted(cpu["roles"].items(), key=lambda kv: -kv[1]))
    phases = ", ".join(f"{p} {sum(v.values()):.1f}" for p, v in cpu["phases"].items())
    return [f"  CPU of every process: {cpu['total_s']:.1f} s; by role: {roles}",
            f"  by phase (s): {phases}"]
