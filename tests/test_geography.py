"""The geography engine on small staged tables: shares, peer sets, tests and disparities against a
brute-force computation (loops over lenders and markets, the random-effects deleted residual),
row-order independence, and bad input (a lender with one record, a market with one lender,
tract fields all "NA", records outside any MSA)."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from aequum.engines.core.engine import run_serial
from aequum.engines.core.spec import SpecError, parse_spec
from aequum.engines.registry import get_engine

SPEC = {
    "name": "geo",
    "source": {"kind": "csv", "path": "x.csv", "id_column": "id"},
    "protected": [{"name": "race", "column": "race", "protected_values": ["B"], "reference_values": ["W"]}],
    "decision": {"column": "approved", "favourable": [1], "unfavourable": [0]},
    "features": [{"name": "lei", "type": "categorical", "mutability": "immutable"},
                 {"name": "msa", "type": "categorical", "mutability": "immutable"}],
    "geography": {"lender": "lei", "market": "msa", "outside_markets": ["99999"], "tract": "tract",
                  "minority_share": "minority", "income_ratio": "income"},
    "engines": {"run": ["geography"], "geography": {"min_applications": 20, "min_cell": 3}},
}


def world(seed=0, lenders=14, n=6000):
    """Records of ``lenders`` lenders in three markets and 99999, lender sizes spread over two
    orders of magnitude, some "NA" tract fields; lender 0 avoids high-minority tracts and denies
    its B applicants more."""
    rng = np.random.default_rng(seed)
    size = np.exp(rng.normal(0, 1.0, lenders))
    lender = rng.choice(lenders, n, p=size / size.sum())
    market = rng.choice(["10", "20", "30", "99999"], n, p=[0.4, 0.3, 0.2, 0.1])
    minority = np.round(rng.uniform(0, 100, n), 2)
    minority[(lender == 0) & (minority > 50) & (rng.random(n) < 0.7)] = 10.0
    income = np.round(rng.uniform(30, 200, n), 2)
    race = np.where(rng.random(n) < 0.3 + 0.4 * (minority > 50), "B", "W")
    approved = (rng.random(n) > 0.1 + 0.1 * (race == "B") + 0.25 * ((lender == 0) & (race == "B"))).astype(int)
    m_text = np.array([f"{v:.2f}" for v in minority], object)
    m_text[rng.random(n) < 0.05] = "NA"
    i_text = np.array([f"{v:.2f}" for v in income], object)
    i_text[rng.random(n) < 0.05] = "NA"
    tract = np.array([f"{v:06d}" for v in rng.integers(0, 300, n)], object)
    tract[rng.random(n) < 0.03] = "NA"
    return {"id": np.arange(n), "lei": np.array([f"L{i:02d}" for i in lender]), "msa": market, "tract": tract,
            "minority": m_text, "income": i_text, "race": race, "approved": approved}


def sub(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


def write(cols, path, order=None):
    keys = list(cols)
    rows = range(len(cols["id"])) if order is None else order
    lines = [",".join(keys)] + [",".join(str(cols[k][i]) for k in keys) for i in rows]
    path.write_text("\n".join(lines) + "\n")


def run(tmp_path, cols, order=None, edit=None):
    from conftest import stage_spec

    write(cols, tmp_path / "x.csv", order)
    raw = copy.deepcopy(SPEC)  # an edit must not reach the next test's spec
    if edit is not None:
        edit(raw)
    spec = parse_spec(raw)
    data = stage_spec(spec, tmp_path, tmp_path)
    return run_serial(get_engine("geography"), data, spec.engines.geography), data


def number(text):
    return np.array([np.nan if t == "NA" else float(t) for t in text])


def brute_force(x, n, market):
    """The deleted-residual test by loops (benchmark module docstring)."""
    y = np.log((x + 0.5) / (n - x + 0.5))
    v = 1 / (x + 0.5) + 1 / (n - x + 0.5)
    q = df = c = 0.0
    for m in np.unique(market):
        i = market == m
        if i.sum() < 2:
            continue
        w = 1 / v[i]
        q += np.sum(w * (y[i] - np.sum(w * y[i]) / w.sum()) ** 2)
        df += i.sum() - 1
        c += w.sum() - np.sum(w ** 2) / w.sum()
    tau2 = max(0.0, (q - df) / c)
    z = np.full(len(x), np.nan)
    for j in range(len(x)):
        others = (market == market[j]) & (np.arange(len(x)) != j)
        if not others.any():
            continue
        w = 1 / (v[others] + tau2)
        mu = np.sum(w * y[others]) / w.sum()
        z[j] = (y[j] - mu) / np.sqrt(v[j] + tau2 + 1 / w.sum())
    return z, tau2


def brute_force_screen(cols, measure, threshold, below=False, approvals=False, low=0.5, high=2.0, minimum=20):
    """Per (lender, market): n, count, peers, peer_n, peer_count by loops, and the deleted-residual
    test (:func:`brute_force`) of the units with ``minimum`` applications."""
    from scipy.stats import norm

    values = number(cols[measure])
    inside = cols["msa"] != "99999"
    out = {}
    volume = {}
    for lender in np.unique(cols["lei"]):
        for market in np.unique(cols["msa"][inside]):
            here = (cols["lei"] == lender) & (cols["msa"] == market)
            if here.any():
                volume[(lender, market)] = int(here.sum())
    for (lender, market), v in volume.items():
        peers = [l2 for (l2, m2), v2 in volume.items() if m2 == market and l2 != lender and low * v <= v2 <= high * v]

        def counts(lenders):
            rows = np.isin(cols["lei"], lenders) & (cols["msa"] == market) & ~np.isnan(values)
            if approvals:
                rows &= cols["approved"] == 1
            hit = (values[rows] < threshold) if below else (values[rows] > threshold)
            return int(rows.sum()), int(hit.sum())

        n, x = counts([lender])
        pn, px = counts(peers)
        out[(lender, market)] = {"n": n, "count": x, "peers": len(peers), "peer_n": pn, "peer_count": px, "p": None}
    tested = [key for key, e in out.items() if e["n"] >= minimum]
    counts = np.array([[out[k]["count"], out[k]["n"]] for k in tested], float).reshape(-1, 2)
    z, _ = brute_force(counts[:, 0], counts[:, 1], np.array([k[1] for k in tested]))
    for key, zz in zip(tested, z):
        out[key]["p"] = None if np.isnan(zz) else float(2 * norm.sf(abs(zz)))
    return out


def test_shares_peers_and_tests_equal_a_brute_force_count(tmp_path):
    cols = world()
    out, _ = run(tmp_path, cols)
    rows = out["geography_lenders"].to_pylist()
    for measure, role, threshold, below in (("minority share > 50%", "minority", 50, False),
                                            ("minority share > 80%", "minority", 80, False),
                                            ("tract income < 80% of MSA", "income", 80, True)):
        for basis in ("applications", "approvals"):
            expected = brute_force_screen(cols, role, threshold, below, basis == "approvals")
            got = {(r["lender"], r["market"]): r for r in rows if r["measure"] == measure and r["basis"] == basis}
            assert set(got) == set(expected)
            for key, e in expected.items():
                g = got[key]
                assert (g["n"], g["count"], g["peers"], g["peer_n"], g["peer_count"]) == \
                       (e["n"], e["count"], e["peers"], e["peer_n"], e["peer_count"]), (measure, basis, key)
                if e["p"] is None:
                    assert g["p_value"] is None and g["note"]
                else:
                    assert g["p_value"] == pytest.approx(e["p"], rel=1e-9, abs=1e-300)
    # the avoiding lender is flagged where it is tested, and its share is below its peers'
    flagged = {(r["lender"], r["measure"]) for r in rows if r["flagged"]}
    assert ("L00", "minority share > 50%") in flagged
    assert all(r["difference"] < 0 for r in rows if r["flagged"])
    # Black / Hispanic shares: not in the data, one row saying so each
    absent = [r for r in rows if r["lender"] is None]
    assert {r["measure"] for r in absent} == {"Black share > 50%", "Hispanic share > 50%"}
    assert all("publishes the minority share only" in r["note"] for r in absent)


def test_adjusted_p_values_are_holm_or_bh_within_each_measure_and_basis(tmp_path):
    from statsmodels.stats.multitest import multipletests

    cols = world(seed=1)
    for correction, method in (("bh", "fdr_bh"), ("holm", "holm")):
        out, _ = run(tmp_path, cols, edit=lambda raw: raw["engines"]["geography"].update(correction=correction))
        rows = [r for r in out["geography_lenders"].to_pylist()
                if r["measure"] == "minority share > 50%" and r["basis"] == "applications" and r["p_value"] is not None]
        expected = multipletests([r["p_value"] for r in rows], method=method)[1]
        assert [r["p_adjusted"] for r in rows] == pytest.approx(list(expected), rel=1e-12)


def brute_force_disparities(cols, attribute_values=("B", "W"), low=0.5, high=2.0, min_cell=3):
    """Per lender: the inverse-variance mean over its eligible markets of log OR_lender - log OR_peers."""
    inside = cols["msa"] != "99999"
    volume = {}
    for lender in np.unique(cols["lei"][inside]):
        for market in np.unique(cols["msa"][inside]):
            here = (cols["lei"] == lender) & (cols["msa"] == market)
            if here.any():
                volume[(lender, market)] = int(here.sum())

    def cells(lenders, market):
        rows = np.isin(cols["lei"], lenders) & (cols["msa"] == market)
        out = []
        for value in attribute_values:
            g = rows & (cols["race"] == value)
            denied = int((g & (cols["approved"] == 0)).sum())
            out += [denied, int(g.sum()) - denied]
        return out  # a (protected denied), b (protected approved), c, d

    result = {}
    for lender in sorted({k[0] for k in volume}):
        num = den = 0.0
        for (l1, market), v in volume.items():
            if l1 != lender:
                continue
            peers = [l2 for (l2, m2), v2 in volume.items() if m2 == market and l2 != lender and low * v <= v2 <= high * v]
            own, peer = cells([lender], market), cells(peers, market)
            if not peers or min(own) < min_cell or min(peer) < min_cell:
                continue
            lor = [math.log(c[0] * c[3] / (c[1] * c[2])) for c in (own, peer)]
            var = sum(1 / c for c in own) + sum(1 / c for c in peer)
            num += (lor[0] - lor[1]) / var
            den += 1 / var
        result[lender] = None if den == 0 else (math.exp(num / den), 2 * _sf(abs(num / den) * math.sqrt(den)))
    return result


def _sf(z):
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_per_lender_disparities_equal_a_brute_force_computation(tmp_path):
    cols = world(seed=2, n=9000)
    out, _ = run(tmp_path, cols)
    got = {r["lender"]: r for r in out["geography_disparities"].to_pylist() if r["attribute"] == "race"}
    expected = brute_force_disparities(cols)
    assert set(got) == set(expected)
    for lender, e in expected.items():
        if e is None:
            assert got[lender]["p_value"] is None and got[lender]["note"]
        else:
            assert got[lender]["ratio"] == pytest.approx(e[0], rel=1e-9)
            assert got[lender]["p_value"] == pytest.approx(e[1], rel=1e-6, abs=1e-15)
    assert got["L00"]["flagged"] and got["L00"]["ratio"] > 1  # the lender planted to deny B more


def test_results_do_not_depend_on_row_order(tmp_path):
    cols = world(seed=3)
    a, _ = run(sub(tmp_path, "a"), cols)
    order = np.random.default_rng(9).permutation(len(cols["id"]))
    b, _ = run(sub(tmp_path, "b"), cols, order=order)
    for name in a:
        assert a[name].equals(b[name]), name


def test_tract_na_is_staged_as_null_and_quarantines_nothing(tmp_path):
    cols = world(seed=4, n=1500)
    _, data = run(tmp_path, cols)
    assert len(data) == 1500  # nothing quarantined for "NA" tract fields
    ids = np.asarray(data.id_text.to_pylist(), int)
    minority = np.asarray(data.column("minority").to_numpy(zero_copy_only=False), float)
    assert np.array_equal(np.isnan(minority), (cols["minority"] == "NA")[ids])
    tract = data.column("tract").to_pylist()
    assert [t is None for t in tract] == list((cols["tract"] == "NA")[ids])


def test_bad_input_gives_notes_not_crashes(tmp_path):
    cols = world(seed=5, n=3000)
    # a lender with one record, alone in a market of its own; another market with one lender
    extra = {"id": [3000, 3001, 3002], "lei": ["ONE", "SOLO", "SOLO"], "msa": ["10", "77", "77"],
             "tract": ["000001"] * 3, "minority": ["60.00", "70.00", "10.00"], "income": ["50.00"] * 3,
             "race": ["B", "B", "W"], "approved": [1, 0, 1]}
    cols = {k: np.concatenate([cols[k].astype(object), np.asarray(extra[k], object)]) for k in cols}
    out, _ = run(tmp_path, cols)
    rows = {(r["lender"], r["market"], r["measure"], r["basis"]): r for r in out["geography_lenders"].to_pylist()}
    one = rows[("ONE", "10", "minority share > 50%", "applications")]
    assert one["applications"] == 1 and one["p_value"] is None and "not tested" in one["note"]
    solo = rows[("SOLO", "77", "minority share > 50%", "applications")]
    assert solo["peers"] == 0 and solo["note"] == "the only lender in the market: no benchmark, not tested"
    disparities = {r["lender"]: r for r in out["geography_disparities"].to_pylist() if r["attribute"] == "race"}
    assert disparities["SOLO"]["p_value"] is None and "no peers" in disparities["SOLO"]["note"]
    assert disparities["ONE"]["p_value"] is None and disparities["ONE"]["note"]


def test_all_na_tract_fields_and_no_market_give_explicit_empty_results(tmp_path):
    cols = world(seed=6, n=1200)
    cols["minority"] = np.array(["NA"] * 1200, object)
    cols["income"] = np.array(["NA"] * 1200, object)
    out, _ = run(sub(tmp_path, "na"), cols)
    rows = [r for r in out["geography_lenders"].to_pylist() if r["lender"] is not None]
    assert rows and all(r["n"] == 0 and r["p_value"] is None and r["note"] for r in rows)
    assert not any(r["flagged"] for r in rows)
    cols = world(seed=6, n=1200)
    cols["msa"] = np.array(["99999"] * 1200, object)  # every record outside any MSA
    out, _ = run(sub(tmp_path, "out"), cols)
    assert all(r["lender"] is None for r in out["geography_lenders"].to_pylist())
    assert out["geography_disparities"].num_rows == 0


def test_the_spec_checks_its_geography_section():
    with pytest.raises(SpecError, match="not a declared categorical feature"):
        parse_spec({**SPEC, "geography": {**SPEC["geography"], "lender": "nope"}})
    with pytest.raises(SpecError, match="already other columns"):
        parse_spec({**SPEC, "geography": {**SPEC["geography"], "tract": "race"}})
    with pytest.raises(SpecError, match="needs the spec's `geography` section"):
        parse_spec({k: v for k, v in SPEC.items() if k != "geography"})
    spec = parse_spec(SPEC)
    assert "minority" in spec.columns() and "tract" in spec.columns()


def test_distinct_tracts_per_unit_from_the_dictionary_codes():
    """Distinct tracts per lender-market unit, from a dictionary column of several chunks whose
    dictionaries differ and repeat a value, with nulls (not counted): as a set per unit counts."""
    import pyarrow as pa

    from aequum.engines.geography.engine import distinct_per_unit, text_codes

    rng = np.random.default_rng(3)
    tracts = [None, *[f"{t:011d}" for t in rng.integers(0, 40, 600)]]
    values = [tracts[i] for i in rng.integers(0, len(tracts), 3000)]
    unit = rng.integers(0, 25, 3000)
    chunks = [pa.array(values[:1000]).dictionary_encode(),
              pa.DictionaryArray.from_arrays(pa.array([0, 1, 0, None] * 250, pa.int32()),
                                             pa.array([values[1500] or "x", values[1500] or "x"])),
              pa.array(values[2000:]).dictionary_encode()]
    values[1000:2000] = [None if i is None else values[1500] or "x" for i in [0, 1, 0, None] * 250]
    column = pa.chunked_array(chunks)
    expected = [len({v for v, u in zip(values, unit) if u == k and v is not None}) for k in range(26)]
    assert distinct_per_unit(unit, text_codes(column), 26).tolist() == expected
    assert distinct_per_unit(unit, np.full(3000, -1), 26).tolist() == [0] * 26


def test_distinct_tracts_per_unit_a_run_of_units_at_a_time():
    """The distinct tracts per unit counted over runs of units (each run's tracts encoded on
    their own, :func:`tracts_per_unit`) equal the count over one encoding of every record, for
    runs of any size, a unit never cut between runs; records outside ``rows`` not counted."""
    import pyarrow as pa

    from aequum.engines.geography.engine import distinct_per_unit, text_codes, tracts_per_unit

    rng = np.random.default_rng(5)
    n = 5000
    values = [None if rng.random() < 0.05 else f"{t:011d}" for t in rng.integers(0, 300, n)]
    column = pa.chunked_array([pa.array(values[:2000]), pa.array(values[2000:])])
    rows = np.flatnonzero(rng.random(n) < 0.8)
    unit = rng.integers(0, 40, len(rows))
    volume = np.bincount(unit, minlength=41)  # the last unit without records
    expected = distinct_per_unit(unit, text_codes(column)[rows], 41)
    assert expected.sum() > 0 and expected[-1] == 0
    for block in (1, 97, 1000, 10 ** 6):
        assert tracts_per_unit(column, rows, unit, volume, block).tolist() == expected.tolist()
    dictionary = pa.chunked_array([pa.array(values[:2000]).dictionary_encode(),
                                   pa.array(values[2000:]).dictionary_encode()])
    assert tracts_per_unit(dictionary, rows, unit, volume, 500).tolist() == expected.tolist()
