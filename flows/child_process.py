"""A step of the flow run in a process of its own, so that the flow's process does not keep
what the step's reads left behind.

Arrow's Parquet reader leaves memory behind in a process outside Arrow's own pool, which
neither ``release_memory`` nor glibc's tunables give back: after the model step of the 10M
HMDA audit (a 1M-record sample read, the surrogate's fit, a pass over 8.4M records) the flow's
process held 0.45-0.53 GB more than before it, through every engine that followed (in one
process: a 1M-record sampled read from the 10M lake kept 0.26-0.34 GB after it was dropped,
0.14-0.21 GB without the row filter; one row group at a time, 0.14-0.22 GB). A spawned process
gives all of it back when it ends.
"""
from __future__ import annotations

import multiprocessing as mp
import pickle
import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any


class ChildEnded(RuntimeError):
    """The child process ended without a result (killed, out of memory, an exit)."""


def run_in_child(fn: Callable[..., Any], args: tuple, say: Callable[[str], None]) -> Any:
    """``fn(*args, say)`` in a spawned process. ``fn`` must be a module-level function and its
    arguments and result picklable. Each message ``fn`` says is passed to ``say`` as it comes
    (progress stays live); its result is returned; the exception it raised is raised here (or
    a RuntimeError with its type, message and traceback when the exception cannot travel)."""
    ctx = mp.get_context("spawn")
    channel = ctx.Queue()
    child = ctx.Process(target=_child, args=(fn, args, channel), name=f"aequum-{fn.__name__}", daemon=True)
    child.start()
    answered = False  # the child gave its result or its error, and is ending
    try:
        while True:
            try:
                kind, payload = channel.get(timeout=1.0)
            except queue.Empty:
                if not child.is_alive():
                    raise ChildEnded(
                        f"the process running {fn.__name__} ended with exit status {child.exitcode} "
                        "before giving its result (killed, or out of memory?)") from None
                continue
            if kind == "say":
                say(payload)
                continue
            answered = True
            if kind == "done":
                return pickle.loads(payload)
            raise pickle.loads(payload)
    finally:
        if answered:  # its result is here: its ending (freeing its memory: a second at 1M HMDA records) is not waited for
            threading.Thread(target=_end, args=(child, 10), name=f"aequum-end-{fn.__name__}", daemon=True).start()
        else:  # left early (an interrupt): stopped at once
            _end(child, 0)
        channel.close()


def _end(child, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``child`` to end, then kill it if it has not."""
    child.join(timeout=timeout)
    if child.is_alive():
        child.kill()
        child.join()


def _child(fn: Callable[..., Any], args: tuple, channel) -> None:
    try:
        result = fn(*args, lambda message: channel.put(("say", message)))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        exc.add_note(f"(raised in the process running {fn.__name__}:\n{traceback.format_exc()})")
        try:
            failure = pickle.dumps(exc)
            pickle.loads(failure)  # some exceptions pickle but cannot be made again from it
        except Exception:  # noqa: BLE001
            failure = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        channel.put(("error", failure))
    else:
        # pickled here, by value: through the queue's own pickler torch would pass its tensors
        # as shared memory, which is gone once this process ends
        channel.put(("done", pickle.dumps(result)))
    channel.close()
    channel.join_thread()  # everything put is sent before the process ends
