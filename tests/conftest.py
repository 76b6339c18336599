"""Shared fixtures: the papers' data folder, a throwaway warehouse, Prefect's test server."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# Prefect must never touch the user's home or phone home from tests.
os.environ.setdefault("PREFECT_HOME", os.path.join(tempfile.gettempdir(), f"aequum-test-prefect-{os.getpid()}"))
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def shared_file(*parts: str) -> Path:
    """A file of ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"reference data {path} is absent (tests read ../shared/data beside the repo)")
    return path


@pytest.fixture
def warehouse(tmp_path):
    from aequum.flows.store.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh.duckdb")
    yield wh
    wh.close()


@pytest.fixture(scope="session")
def prefect_server():
    """One ephemeral Prefect API for every flow test of the session (~17 s to start); its API
    URL, for the tests' command-line subprocesses."""
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield PREFECT_API_URL.value()


@pytest.fixture
def staged_data(tmp_path):
    """Stage a spec (path or AuditSpec) into a throwaway warehouse and return its AuditData."""
    return lambda spec, spec_dir=None: stage_spec(spec, tmp_path, spec_dir)


def stage_spec(spec, tmp: Path, spec_dir: Path | None = None, warehouse: Path | None = None):
    """Stage a spec (path or AuditSpec) into a throwaway warehouse under ``tmp`` (or into
    ``warehouse``) and its lake ``tmp/lake``; its AuditData."""
    from aequum.engines.core.data import AuditData
    from aequum.engines.core.spec import AuditSpec, load_spec
    from aequum.flows.model_step import fit_model
    from aequum.flows.store.staging import stage
    from aequum.flows.store.warehouse import Warehouse

    if not isinstance(spec, AuditSpec):
        spec_dir = Path(spec).resolve().parent
        spec = load_spec(spec)
    spec_dir = spec_dir or tmp
    with Warehouse(warehouse or tmp / "staged.duckdb") as wh:
        ref = stage(spec, spec_dir, wh, tmp / "lake")
        table = wh.staged(ref.version)
    return AuditData(spec, table, ref.categories, fit_model(spec, spec_dir, table, ref.categories))


@pytest.fixture(scope="session")
def small_audit_warehouse(tmp_path_factory):
    """A warehouse holding one real run of the loan spec at 400 rows, every engine of the spec
    (tests/audit_tables.py); read-only use only."""
    from audit_tables import small_audit

    return small_audit(tmp_path_factory.mktemp("small_audit"))


def pytest_collection_modifyitems(items):
    """The long Prefect tests first: with the suite in two processes (.ci/test, pytest-xdist by
    file) the quick tests then fill the other process instead of one process ending alone."""
    items.sort(key=lambda item: item.get_closest_marker("prefect") is None)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    """Collect the session's garbage now, then freeze what is left (all of it alive), so that
    pytest's own collections at its end (unraisable-exception plugin: one in ``unconfigure``,
    one in its cleanup) scan nothing. In a pytest-xdist worker those two passes over the heap
    the tests imported (Prefect's server, torch, Dask: about 0.5M objects, 1-1.5 s each on two
    loaded cores) came after the worker had reported its end; execnet gives a worker 5 s to
    finish and then sends it SIGINT, whose KeyboardInterrupt landed in a finaliser the
    collection was running and ended the run with a PytestUnraisableExceptionWarning. Here, as
    a normal ``sessionfinish`` hook (after the session fixtures' teardown), it runs before
    xdist's hook wrapper reports the end; every finaliser still runs under pytest's
    unraisable-exception hook."""
    import gc

    gc.collect()
    gc.freeze()
