"""The command line: clean one-line errors for user mistakes, generate/ingest/runs/show work."""
from __future__ import annotations

import yaml
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from aequum.flows.cli import main


def test_generate_ingest_runs_show(tmp_path, capsys):
    out = tmp_path / "loan.parquet"
    assert main(["generate", "loan", "--rows", "500", "--out", str(out)]) == 0
    assert pq.read_metadata(out).num_rows == 500
    spec = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    spec["source"] = {"kind": "parquet", "path": str(out), "id_column": "id"}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    wh = str(tmp_path / "wh.duckdb")
    assert main(["ingest", "--spec", str(tmp_path / "s.yaml"), "--warehouse", wh,
                 "--lake", str(tmp_path / "lake")]) == 0
    assert "500 rows staged" in capsys.readouterr().out
    assert main(["runs", "--warehouse", wh]) == 0


def test_user_errors_are_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nsource: {kind: csv}\n")
    assert main(["ingest", "--spec", str(bad), "--warehouse", str(tmp_path / "w.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aequum: error: invalid audit spec") and "Traceback" not in err
    assert main(["runs", "--warehouse", str(tmp_path / "none.duckdb")]) == 2
    assert "no warehouse" in capsys.readouterr().err
    assert main(["ingest", "--spec", str(tmp_path / "missing.yaml")]) == 2


def test_show_names_unknown_tables(tmp_path, capsys):
    from aequum.flows.warehouse import Warehouse

    Warehouse(tmp_path / "w.duckdb").close()
    assert main(["show", "nope", "--warehouse", str(tmp_path / "w.duckdb")]) == 2
    assert "no table audit.nope" in capsys.readouterr().err


def test_prefect_yaml_deployments_point_at_real_flows():
    from prefect.flows import load_flow_from_entrypoint

    conf = yaml.safe_load((REPO / "prefect.yaml").read_text())
    assert conf["deployments"]
    for dep in conf["deployments"]:
        flow = load_flow_from_entrypoint(str(REPO / dep["entrypoint"]))
        flow.validate_parameters(dep["parameters"])
        assert (REPO / dep["parameters"]["spec_path"]).exists()
        assert dep["schedules"][0]["cron"]


def test_missing_model_file_is_a_user_error(tmp_path, capsys, monkeypatch):
    spec = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    spec["model"] = {"kind": "mlp", "features": ["AnnualSalary", "AccountBalance"], "path": "none.pt",
                     "hidden": [4]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    from aequum.flows.audit import fit_model
    from aequum.engines.core.models import ModelError
    from aequum.engines.core.spec import load_spec

    with pytest.raises(ModelError, match="not found"):
        fit_model(load_spec(tmp_path / "s.yaml"), tmp_path, None, {})


def test_surrogate_for_decisions_fits_the_recorded_ones(staged_data, tmp_path):
    spec = yaml.safe_load((REPO / "data" / "specs" / "loan.yaml").read_text())
    spec["model"] = {"kind": "surrogate", "target": "decision", "use_for_decisions": True,
                     "features": ["AnnualSalary", "AccountBalance"], "hidden": [8], "epochs": 200}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    data = staged_data(tmp_path / "s.yaml")
    recorded = data.table["_decision"].to_numpy()
    assert data.model.fidelity["train"] > 0.9
    assert (data.decision == recorded).mean() > 0.9
