"""Engines that start side by side on one worker's threads import their modules one at a time
(engines/core/imports.py): two first imports of scipy at once failed an audit's outcome and
RAGUEL engines with a half-initialised scipy."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

from aequum.engines.core import imports


def test_first_imports_run_one_at_a_time(monkeypatch):
    inside, most = [0], [0]
    guard = threading.Lock()

    def slow_import(name):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        with guard:
            inside[0] -= 1
        return name

    monkeypatch.setattr(imports, "import_module", slow_import)
    threads = [threading.Thread(target=imports.load, args=(f"m{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1


def test_unpickling_waits_for_an_import_in_progress(monkeypatch):
    """A packed model is unpickled (importing torch) one import at a time with the engines'
    loads: an engine task unpickled the model while another loaded PBA, and both failed on a
    half-initialised torch."""
    import pickle

    started, order = threading.Event(), []

    def slow_import(name):
        started.set()
        time.sleep(0.1)
        order.append("import")
        return name

    monkeypatch.setattr(imports, "import_module", slow_import)
    loading = threading.Thread(target=imports.load, args=("m",))
    loading.start()
    started.wait()
    assert imports.unpickle(pickle.dumps({"a": 1})) == {"a": 1}
    order.append("unpickled")
    loading.join()
    assert order == ["import", "unpickled"]


def test_every_engine_loads_at_once_on_threads_of_a_fresh_process():
    """What a worker does when a run's engines start together: every engine class and the
    libraries the engines import at first use, each on its own thread, in a process that has
    imported none of them."""
    code = """
import threading
from aequum.engines.registry import ENGINES, get_engine
from aequum.engines.core.imports import load
from aequum.engines.outcome.stats import z_value
errors = []
def run(f):
    try:
        f()
    except BaseException as exc:
        errors.append(repr(exc))
jobs = [lambda n=n: get_engine(n) for n in ENGINES] + [lambda: z_value(0.95), lambda: load("torch"),
        lambda: load("highspy"), lambda: load("scipy.sparse.csgraph")]
threads = [threading.Thread(target=run, args=(j,)) for j in jobs]
for t in threads: t.start()
for t in threads: t.join()
print(errors)
assert not errors, errors
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
