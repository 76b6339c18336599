"""Shared fixtures: the papers' data folder, a throwaway warehouse, Prefect's test server."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

# Prefect must never touch the user's home or phone home from tests.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="aequum-prefect-home-"))
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
    from flows.warehouse import Warehouse

    wh = Warehouse(tmp_path / "wh.duckdb")
    yield wh
    wh.close()


@pytest.fixture(scope="session")
def prefect_server():
    """One ephemeral Prefect API for every flow test of the session (~17 s to start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield
