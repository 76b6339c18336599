"""The temporary Prefect API server of a command-line run (flows/prefect_api.py)."""
from __future__ import annotations


def test_a_command_line_audit_on_its_own_temporary_server_ends_cleanly(tmp_path):
    """`aequum audit` with no Prefect server configured: it starts one (TemporaryAPI: a free port,
    answered health checks), reports to it, drains its logs before stopping it and leaves
    nothing running or complaining at exit."""
    import os
    import subprocess
    import sys

    import yaml

    from conftest import REPO

    raw = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    raw["source"]["rows"] = 400
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    out = subprocess.run([sys.executable, "-m", "aequum.flows.cli", "audit", "--spec", str(tmp_path / "s.yaml"),
                          "--engines", "outcome", "--warehouse", str(tmp_path / "wh.duckdb"),
                          "--lake", str(tmp_path / "lake")], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert ": succeeded" in out.stdout
    for noise in ("Error logging to API", "leaked", "Traceback"):
        assert noise not in out.stderr, out.stderr[-3000:]
    # its server was stopped, not left behind
    assert _servers_of(tmp_path / "prefect") == []


def test_a_command_line_audit_that_fails_its_checks_leaves_no_server(tmp_path):
    """The CLI starts the temporary server early (its start-up overlaps Prefect's and Dask's
    imports), but only once the spec and source pass their checks: a spec that fails them ends
    with one line, exit 2, and no server."""
    import os
    import subprocess
    import sys

    (tmp_path / "s.yaml").write_text("name: broken\nsource: {kind: csv, path: missing.csv}\n")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    out = subprocess.run([sys.executable, "-m", "aequum.flows.cli", "audit", "--spec", str(tmp_path / "s.yaml"),
                          "--warehouse", str(tmp_path / "wh.duckdb"), "--lake", str(tmp_path / "lake")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
    assert _servers_of(tmp_path / "prefect") == []
    assert not (tmp_path / "wh.duckdb").exists()


def _servers_of(prefect_home) -> list[int]:
    """Prefect API server processes running with ``prefect_home`` as their PREFECT_HOME."""
    from pathlib import Path

    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            env = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if b"prefect.server.api.server:create_app" in args and f"PREFECT_HOME={prefect_home}".encode() in env:
            found.append(int(proc.name))
    return found
