"""Source reuse says what it trusted and can be asked to check: a source whose content changed
under the same sizes and modification times is reused unread with that said, and read again
with --check-source; a lake copy whose files were edited is staged again, not reused."""
from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute  # noqa: F401
import pyarrow.parquet as pq
import pytest

from aequum.flows.commands.cli import main
from aequum.flows.store.staging import stage


def touch_back(path, text: str) -> None:
    """Write ``text`` to ``path`` keeping its size and modification time (``touch -r``)."""
    st = path.stat()
    assert len(text.encode()) == st.st_size
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_unread_reuse_is_said_and_check_source_reads_the_changed_content(tmp_path, warehouse):
    from test_integrity import small_csv_spec

    spec = small_csv_spec(tmp_path)
    first = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    csv = tmp_path / "d.csv"
    touch_back(csv, csv.read_text().replace("\n3,F,121,0\n", "\n3,F,121,1\n"))
    said = []
    again = stage(spec, tmp_path, warehouse, tmp_path / "lake", progress=said.append)
    assert again.reused and again.version == first.version
    assert any("reused unread: same files, sizes and modification times" in m and "--check-source" in m
               for m in said)
    checked = stage(spec, tmp_path, warehouse, tmp_path / "lake", check_source=True)
    assert not checked.reused and checked.version != first.version


def test_an_edited_lake_copy_with_the_same_rows_is_staged_again(tmp_path, warehouse):
    from test_integrity import small_csv_spec

    spec = small_csv_spec(tmp_path)
    first = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    part = sorted((tmp_path / "lake").rglob("*.parquet"))[0]
    table = pq.read_table(part)
    pq.write_table(table.set_column(table.column_names.index("income"), "income",
                                    pa.compute.add(table["income"], 1)), part)  # same rows, other values
    said = []
    again = stage(spec, tmp_path, warehouse, tmp_path / "lake", progress=said.append)
    assert any("missing, incomplete or changed: staging it again" in m for m in said)
    assert again.version == first.version and pq.read_table(part).num_rows == table.num_rows


def test_the_command_line_offers_the_content_check(capsys):
    for command in ("audit", "ingest"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--check-source" in capsys.readouterr().out
