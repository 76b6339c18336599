"""The run's model is built only when an engine that reads it runs: each engine
declares whether it reads the model (``reads_model``, ``uses_model``); a run of engines that
do not (outcome without labels, reasons, regression, pricing, geography, raguel, fgce) fits no
surrogate, records no model fingerprint and no model quality; a run with one that does (PBA)
fits it."""
from __future__ import annotations

import copy

import pytest
import yaml

from conftest import REPO
from aequum.engines.core.spec import parse_spec
from aequum.engines.registry import ENGINES
from aequum.flows import model_step
from aequum.flows.model_step import model_readers

HMDA = yaml.safe_load((REPO / "data" / "specs" / "hmda.yaml").read_text())
BLACK = "race=Black or African American"


def hmda(**changes) -> dict:
    raw = copy.deepcopy(HMDA)
    raw.update(changes)
    return raw


def test_each_engine_declares_whether_it_reads_the_model():
    spec = parse_spec(hmda(), where="(test)")
    assert model_readers(spec, ["outcome", "reasons", "regression"]) == []
    assert model_readers(spec, ["outcome", "pba", "reasons"]) == ["pba"]
    assert model_readers(spec, list(ENGINES)) == ["cst", "pba", "cec"]  # the registry's order
    # the outcome metrics read the model's scores for the AUC, which needs labels
    labelled = parse_spec(hmda(label={"column": "action_taken", "positive": ["1"]}), where="(test)")
    assert model_readers(labelled, ["outcome", "reasons"]) == ["outcome"]
    # a model that makes the decisions is read by every engine that reads decisions
    surrogate = parse_spec(yaml.safe_load((REPO / "data" / "specs" / "student_surrogate.yaml").read_text()),
                           where="(test)")
    assert surrogate.model.use_for_decisions
    assert model_readers(surrogate, ["outcome", "fgce"]) == ["outcome", "fgce"]
    # no model: nothing reads one
    raw = hmda()
    raw.pop("model")
    raw.pop("scm", None)
    raw["engines"] = {"run": ["outcome"]}
    assert model_readers(parse_spec(raw, where="(test)"), ["outcome", "pba"]) == []


def test_outcome_reads_the_model_only_with_labels():
    from aequum.engines.core.engine import declared_reads_model

    spec = parse_spec(hmda(), where="(test)")
    assert not declared_reads_model(spec.engines.outcome, spec)
    labelled = parse_spec(hmda(label={"column": "action_taken", "positive": ["1"]}), where="(test)")
    assert declared_reads_model(labelled.engines.outcome, labelled)
    for name in ("reasons", "regression", "raguel", "fgce", "pricing", "geography"):
        assert not declared_reads_model(spec.engines.params(name), spec), name


def test_an_engine_that_needs_a_usable_model_declares_that_it_reads_it():
    """``uses_model`` (skipped on a degenerate surrogate) and ``reads_model`` (the model is
    built for it) agree for every registered engine."""
    from aequum.engines.core.engine import declared_reads_model
    from aequum.engines.registry import get_engine

    spec = parse_spec(hmda(), where="(test)")
    for name in ENGINES:
        if getattr(get_engine(name), "uses_model", False):
            assert declared_reads_model(spec.engines.params(name), spec), name


def test_deciding_whether_to_build_the_model_imports_no_engine():
    """The flow's process decides from the parameters alone: PBA's and CEC's modules import
    torch (8 s, and its memory held through the run)."""
    import subprocess
    import sys

    code = ("import sys, yaml\n"
            "from aequum.engines.core.spec import load_spec\n"
            "from aequum.flows.model_step import model_readers\n"
            f"spec = load_spec({str(REPO / 'data' / 'specs' / 'hmda.yaml')!r})\n"
            "assert model_readers(spec, spec.engines.run) == ['cst', 'cec', 'pba'], model_readers(spec, spec.engines.run)\n"
            "from aequum.engines.registry import ENGINES\n"
            "engines = [t.split(':')[0] for t, _ in ENGINES.values() if t.split(':')[0] in sys.modules]\n"
            "assert 'torch' not in sys.modules and not engines, engines\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


@pytest.mark.prefect
def test_a_run_without_a_model_reader_fits_no_surrogate_and_one_with_pba_does(prefect_server, tmp_path, monkeypatch):
    from aequum.flows.audit import audit_flow
    from aequum.flows.store.warehouse import Warehouse

    raw = hmda()
    raw["source"]["rows"] = 2000
    raw["model"]["epochs"] = 20
    raw["engines"]["pba"].update(sample=10, batch_size=10, attributes=[BLACK])
    spec = tmp_path / "hmda.yaml"
    spec.write_text(yaml.safe_dump(raw))
    fitted = []
    real = model_step.fit_model

    def fit_model(*args, **kwargs):
        fitted.append(args[0].name)
        return real(*args, **kwargs)

    monkeypatch.setattr(model_step, "fit_model", fit_model)
    wh, lake = str(tmp_path / "wh.duckdb"), str(tmp_path / "lake")
    audit_flow(str(spec), warehouse=wh, lake=lake, run_id="plain", engines=["outcome", "reasons", "regression"])
    assert fitted == []
    audit_flow(str(spec), warehouse=wh, lake=lake, run_id="pba", engines=["outcome", "pba"])
    assert fitted == ["hmda"]
    with Warehouse(wh, read_only=True) as w:
        assert {e["status"] for e in w.engine_status("plain").values()} == {"succeeded"}
        assert w.engine_status("pba")["pba"]["status"] == "succeeded"
        assert w.run("plain")["model_fingerprint"] is None and w.run("pba")["model_fingerprint"] is not None
        quality = w.con.execute("SELECT run_id, count(*) FROM audit.model_quality GROUP BY run_id").fetchall()
    assert [r for r, _ in quality] == ["pba"]
