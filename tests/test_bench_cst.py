"""``aequum bench cst``'s measurement at scale, at its quick size (100k records; fewer leave
the rarest races below k = 100 members): CST over generated HMDA records, scored against the
generator's truth as an audit scores it."""
from __future__ import annotations

from aequum.flows.bench.cst import at_scale


def test_cst_at_scale_scores_its_findings(capsys):
    res = at_scale(100_000)
    assert res["rows"] == 100_000 and res["complainants"] > 500
    for method in ("ST", "CST", "CF"):
        assert 0.0 <= res[f"{method}_precision"] <= 1.0 and 0.0 <= res[f"{method}_recall"] <= 1.0
    assert "CST k=100 over 100,000 HMDA rows" in capsys.readouterr().out
