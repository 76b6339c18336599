"""Source reuse says what it trusted: by default a source is reused only when its files' bytes
hash as when staged, so a content change under the same sizes and modification times is staged
again; with --trust-mtime it is reused unread with that said, and read again with
--check-source; a lake copy whose files were edited is staged again, not reused."""
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


def test_a_source_edited_with_its_size_and_mtime_kept_is_staged_again_by_default(tmp_path, warehouse):
    """The bytes are hashed before a reuse: an edit that keeps the size and the modification
    time (1,181 favourable staged against 881 in the file, before) is seen and staged."""
    from test_integrity import small_csv_spec

    spec = small_csv_spec(tmp_path)
    first = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    said = []
    same = stage(spec, tmp_path, warehouse, tmp_path / "lake", progress=said.append)
    assert same.reused and same.version == first.version
    assert any("source reused: same files and content (hashed)" in m for m in said), said
    csv = tmp_path / "d.csv"
    touch_back(csv, csv.read_text().replace("\n3,F,121,0\n", "\n3,F,121,1\n"))
    said = []
    again = stage(spec, tmp_path, warehouse, tmp_path / "lake", progress=said.append)
    assert not again.reused and again.version != first.version
    assert any("different content: staging them again" in m for m in said), said
    assert stage(spec, tmp_path, warehouse, tmp_path / "lake").version == again.version  # reused now


def test_trust_mtime_reuses_unread_with_that_said_and_check_source_reads(tmp_path, warehouse):
    from test_integrity import small_csv_spec

    spec = small_csv_spec(tmp_path)
    first = stage(spec, tmp_path, warehouse, tmp_path / "lake")
    csv = tmp_path / "d.csv"
    touch_back(csv, csv.read_text().replace("\n3,F,121,0\n", "\n3,F,121,1\n"))
    said = []
    again = stage(spec, tmp_path, warehouse, tmp_path / "lake", progress=said.append, trust_mtime=True)
    assert again.reused and again.version == first.version
    assert any("reused unread: same files, sizes and modification times" in m and "--trust-mtime" in m
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
        out = capsys.readouterr().out
        assert "--check-source" in out and "--trust-mtime" in out
