"""What a command shows while its long steps run: one line per step followed (an engine of an
audit, the report's sections), with its pieces done of the total, the time it has taken and an
estimate of the time left.

On a terminal (standard output and the command's standard error both terminals) each step is one
line of a ``rich`` progress display that is redrawn in place, below the log lines (which go on
scrolling above it: :class:`~aequum.flows.terminal.Terminal` writes them through the display's
console); elsewhere (a pipe, a file, a scheduled run) the same figures are plain log lines, at
most one every ``every`` seconds per step and one when it ends. ``AEQUUM_PROGRESS=plain`` (or
``live``) chooses either whatever the terminal.

An engine's pieces run on Dask workers: the engine's task sends its progress as a Dask event
(:data:`TOPIC`, :func:`send`) and the flow's process, subscribed to the topic on the run's
scheduler (:func:`following`), shows it; so it works the same on an external scheduler.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

TOPIC = "aequum-progress"


def clock(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def plain_line(name: str, done: int, total: int | None, elapsed: float, unit: str = "pieces") -> str:
    """``engine cst: 7/14 pieces done, 12 s elapsed, about 12 s left`` (the estimate: the time
    per piece so far times the pieces left; none before the first piece)."""
    if total is None:
        return f"{name}: preparing, {clock(elapsed)} elapsed"
    line = f"{name}: {done}/{total} {unit} done, {clock(elapsed)} elapsed"
    if 0 < done < total:
        line += f", about {clock(elapsed * (total - done) / done)} left"
    return line


def live_wanted(terminal_fd: int | None) -> bool:
    """Whether progress is drawn in place: ``AEQUUM_PROGRESS`` (``live`` / ``plain``), else
    standard output and ``terminal_fd`` (where it is drawn) both terminals."""
    choice = os.environ.get("AEQUUM_PROGRESS", "").strip().lower()
    if choice in ("live", "plain"):
        return choice == "live" and terminal_fd is not None
    try:
        return terminal_fd is not None and os.isatty(1) and os.isatty(terminal_fd)
    except OSError:
        return False


class Board:
    """The progress of named steps: :meth:`update` with pieces done of a total (``None``: the
    step is preparing, its pieces not yet known) and the seconds since the step started. With a
    ``rich`` ``console``: one live line per step; else plain lines through ``say``."""

    def __init__(self, say: Callable[[str], None], console=None, every: float = 10.0, unit: str = "pieces"):
        self.say, self.every, self.unit = say, every, unit
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._ended: set[str] = set()
        self._done: dict[str, int] = {}
        self._tasks: dict[str, int] = {}
        self._live = None
        if console is not None:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self._live = Progress(TextColumn("{task.description}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                                  TextColumn(unit), TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("left"),
                                  TimeRemainingColumn(), console=console, transient=False, refresh_per_second=4)
            self._live.start()

    def update(self, name: str, done: int, total: int | None, elapsed: float) -> None:
        with self._lock:
            if done < self._done.get(name, 0):  # a new round of the step's pieces
                self._ended.discard(name)
            self._done[name] = done
            if self._live is not None:
                self._draw(name, done, total)
                return
            now = time.monotonic()
            last = self._last.setdefault(name, now)  # a step's first line comes ``every`` s after it starts
            if total is None or name in self._ended:
                return
            finished = done >= total
            if finished or now - last >= self.every:
                self._last[name] = now
                if finished:
                    self._ended.add(name)
                self.say(plain_line(name, done, total, elapsed, self.unit))

    def _draw(self, name: str, done: int, total: int | None) -> None:
        if name not in self._tasks:
            self._tasks[name] = self._live.add_task(name, total=total)
        self._live.update(self._tasks[name], completed=done, total=total)

    def close(self) -> None:
        with self._lock:
            if self._live is not None:
                self._live.stop()
                self._live = None


@contextmanager
def board(say: Callable[[str], None], every: float = 10.0, unit: str = "pieces"):
    """A :class:`Board` drawn on the current :class:`~aequum.flows.terminal.Terminal` of this
    process (without one, on standard error) when progress is live there (:func:`live_wanted`),
    else saying plain lines."""
    from aequum.flows import terminal

    own = terminal.terminal_fd() is None  # no Terminal: drawn on this process's standard error
    console = None
    if live_wanted(2 if own else terminal.terminal_fd()):
        if own:
            from rich.console import Console

            console = Console(stderr=True, force_terminal=True)
        else:
            console = terminal.live_console()
    b = Board(say, console, every, unit)
    try:
        yield b
    finally:
        b.close()
        if console is not None and not own:
            terminal.detach_console()


_WATCHERS: list[Callable[[str, int, int | None], None]] = []


@contextmanager
def watching(watcher: Callable[[str, int, int | None], None]):
    """``watcher(name, done, total)`` called with each progress event :func:`following` shows
    while in the block (the bench marks an audit's engines by them: ``flows.bench.measure``)."""
    _WATCHERS.append(watcher)
    try:
        yield
    finally:
        _WATCHERS.remove(watcher)


@contextmanager
def following(address: str | None, say: Callable[[str], None], every: float = 10.0):
    """Show the progress events (:data:`TOPIC`) that the engines of a run send from the Dask
    workers of the scheduler at ``address`` while in the block (nothing without an address)."""
    if not address:
        yield None
        return
    from distributed import Client

    with board(say, every) as b, Client(address, set_as_default=False) as client:
        def shown(event) -> None:  # (scheduler time, message); Dask adds the sending worker
            m = event[1]
            b.update(m["name"], m["done"], m["total"], m["elapsed"])
            for watcher in list(_WATCHERS):
                watcher(m["name"], m["done"], m["total"])

        client.subscribe_topic(TOPIC, shown)
        try:
            yield b
        finally:
            try:
                client.unsubscribe_topic(TOPIC)
            except (ValueError, OSError):
                pass


def send(name: str, done: int, total: int | None, elapsed: float) -> bool:
    """Send a step's progress as a Dask event from the worker this runs on; False when not on a
    Dask worker (the caller then says it itself)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return False
    worker.log_event(TOPIC, {"name": name, "done": done, "total": total, "elapsed": elapsed})
    return True
