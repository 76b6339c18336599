"""The Postgres reader against a real throwaway PostgreSQL server on a loopback port."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from aequum.engines.core.spec import parse_spec
from aequum.flows.store.readers import SourceError
from aequum.flows.store.staging import stage

pytestmark = pytest.mark.postgres


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(*cmd: str) -> list[str]:
    return list(cmd) if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *cmd]


@pytest.fixture(scope="module")
def pg_uri():
    if not (shutil.which("initdb") and shutil.which("pg_ctl")):
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    root = Path(tempfile.mkdtemp(prefix="aequum-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
    port = _free_port()
    subprocess.run(_as_postgres("initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"),
                   check=True, capture_output=True)
    subprocess.run(_as_postgres("pg_ctl", "-D", str(data), "-l", str(root / "log"), "-w", "-o",
                                f"-p {port} -k {root} -c listen_addresses=127.0.0.1", "start"),
                   check=True, capture_output=True)
    subprocess.run(_as_postgres("pg_ctl", "-D", str(data), "-w", "status"), check=True, capture_output=True)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres("pg_ctl", "-D", str(data), "-m", "immediate", "stop"), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


HOSTILE = 'loans"; DROP TABLE keep; --'


@pytest.fixture(scope="module")
def loaded(pg_uri):
    import adbc_driver_postgresql.dbapi as pg

    with pg.connect(pg_uri) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE keep (x int)")
        quoted = '"' + HOSTILE.replace('"', '""') + '"'
        cur.execute(f"CREATE TABLE {quoted} (id int, sex text, income double precision, y int)")
        cur.execute(f"INSERT INTO {quoted} VALUES (1,'F',10,1),(2,'M',20,0),(3,'F',NULL,0),(4,'M',40,1)")
        conn.commit()
    return pg_uri


def _spec(uri, **source):
    return parse_spec({
        "name": "pg", "source": {"kind": "postgres", "uri": uri, "id_column": "id", **source},
        "protected": [{"name": "sex", "column": "sex", "protected_values": ["F"], "reference_values": ["M"]}],
        "decision": {"column": "y", "favourable": [1]},
        "features": [{"name": "income", "type": "numeric"}],
        "ingest": {"max_bad_fraction": 0.5},
    })


def test_postgres_table_with_hostile_name(loaded, tmp_path, warehouse):
    ref = stage(_spec(loaded, table=HOSTILE), tmp_path, warehouse, tmp_path / "lake")
    assert (ref.rows_staged, ref.rows_quarantined) == (3, 1)
    q = warehouse.con.execute("SELECT record_id, field, reason FROM audit.quarantine").fetchall()
    assert q == [("3", "income", "missing value")]
    import adbc_driver_postgresql.dbapi as pg

    with pg.connect(loaded) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM keep")
        assert cur.fetchall() == [(0,)]


def test_postgres_query_and_bad_uri(loaded, tmp_path, warehouse):
    quoted = '"' + HOSTILE.replace('"', '""') + '"'
    ref = stage(_spec(loaded, query=f"SELECT * FROM {quoted} WHERE income IS NOT NULL"), tmp_path,
                warehouse, tmp_path / "lake")
    assert ref.rows_staged == 3
    with pytest.raises(SourceError, match="cannot read"):
        stage(_spec(loaded, table="no_such_table"), tmp_path, warehouse, tmp_path / "lake")
    for hostile, message in [
            ("SELECT 1 AS id; DROP TABLE keep", "exactly one SELECT"),
            ("SELECT * FROM keep) AS t; DROP TABLE keep; SELECT * FROM (SELECT * FROM keep",
             "not a valid SQL query"),
            ("SELECT * FROM keep; ATTACH 'x.duckdb' AS o (READ_WRITE); DROP TABLE keep", "exactly one SELECT"),
            # one SELECT statement with a data-modifying CTE: refused from its parse tree (and the
            # read-only transaction would refuse it too)
            ("WITH d AS (DELETE FROM keep RETURNING *) SELECT * FROM d", "must only read: it holds DELETE")]:
        with pytest.raises(SourceError, match=message):
            stage(_spec(loaded, query=hostile), tmp_path, warehouse, tmp_path / "lake")
    import adbc_driver_postgresql.dbapi as pg

    with pg.connect(loaded) as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM keep")
        assert cur.fetchall() == [(0,)]
    with pytest.raises(SourceError, match="cannot connect"):
        stage(_spec("postgresql://postgres@127.0.0.1:1/postgres", table="keep"), tmp_path, warehouse, tmp_path / "lake")
