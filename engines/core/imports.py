"""First imports made while engines run side by side in one process.

A Dask worker runs several engine tasks at once, each on a thread of its own, and each
imports its engine's modules at first use. Two threads importing scipy's submodules at once
can each find the other's half-initialised module (scipy's own modules import one another):
an audit's outcome and RAGUEL engines both failed so, on one worker, with "cannot import name
'PytestTester' from partially initialized module 'scipy._lib._testutils'" and
"KeyError: 'scipy'". Every import made at an engine's first use goes through :func:`load`,
one at a time per process.
"""
from __future__ import annotations

import pickle
import threading
from importlib import import_module
from types import ModuleType

_ONE_AT_A_TIME = threading.RLock()  # re-entrant: an imported module may load another


def load(module: str) -> ModuleType:
    """``importlib.import_module(module)``, one such import at a time in this process."""
    with _ONE_AT_A_TIME:
        return import_module(module)


def unpickle(payload: bytes):
    """``pickle.loads(payload)`` one import at a time like :func:`load`: a pickled model imports
    torch as it is unpickled, and an engine task that did so beside another loading CEC or PBA
    (torch too) failed with "cannot import name 'ModuleList' from partially initialized module
    'torch.nn.modules.container'" or "KeyError: 'torch.nn.modules'" (a 1M audit's CST and PBA)."""
    with _ONE_AT_A_TIME:
        return pickle.loads(payload)
