"""The temporary Prefect API server of a command-line run (flows/prefect_api.py)."""
from __future__ import annotations

import json
import urllib.request

from aequum.flows.prefect_api import TemporaryAPI


def test_the_temporary_api_answers_then_stops_without_a_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    server = TemporaryAPI()
    process = server.process
    try:
        url = server.wait(timeout=120)
        assert url == f"http://127.0.0.1:{server.port}/api"
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            assert response.status == 200 and json.loads(response.read()) is True
    finally:
        server.stop()
    assert process.poll() is not None and server.process is None
