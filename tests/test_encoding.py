"""Shared feature encoding: scalings, one-hot, and the inverse map back to raw values."""
from __future__ import annotations

import numpy as np
import pytest

from aequum.engines.core.encoding import Encoder, encoder_for

NAMES = ["income", "grade", "city"]
KINDS = ["numeric", "ordinal", "categorical"]
LEVELS = [None, ["C", "B", "A"], ["x", "y", "z"]]
X = np.array([[10.0, 0, 2], [30.0, 2, 0], [20.0, 1, 1], [20.0, 2, 2]])


def test_minmax_onehot_round_trip():
    enc = Encoder.fit(X, NAMES, KINDS, LEVELS)
    Z = enc.transform(X)
    assert enc.columns == ["income", "grade", "city=x", "city=y", "city=z"]
    assert Z.min() >= 0 and Z.max() <= 1 and np.allclose(Z[:, 2:].sum(1), 1)
    assert Z[:, 0].tolist() == [0, 1, 0.5, 0.5] and Z[:, 1].tolist() == [0, 1, 0.5, 1]
    assert np.array_equal(enc.inverse(Z), X)
    assert enc.raw_values(X[:1]) == [[10.0, "C", "z"]]


def test_zscore_and_codes():
    enc = Encoder.fit(X, NAMES, KINDS, LEVELS, numeric="zscore", ordinal="rank", categorical="code")
    Z = enc.transform(X)
    assert enc.width == 3 and abs(Z[:, 0].mean()) < 1e-12 and Z[:, 0].std(ddof=1) == pytest.approx(1)
    assert np.allclose(enc.inverse(Z), X)


def test_inverse_snaps_perturbed_points_to_valid_values():
    enc = Encoder.fit(X, NAMES, KINDS, LEVELS)
    Z = enc.transform(X) + np.array([0.0, 0.2, 0.1, 0.3, -0.1])
    back = enc.inverse(Z)
    assert set(back[:, 1]) <= {0, 1, 2} and set(back[:, 2]) <= {0, 1, 2}


def test_constant_column_and_bad_codes():
    enc = Encoder.fit(np.array([[5.0, 0, 0], [5.0, 1, 1]]), NAMES, KINDS, LEVELS)
    assert enc.transform(np.array([[5.0, 0, 0]]))[0, 0] == 0
    with pytest.raises(ValueError, match="city"):
        enc.transform(np.array([[5.0, 0, 7]]))
    with pytest.raises(ValueError, match="needs its levels"):
        Encoder.fit(X, NAMES, KINDS, [None, None, None])


def test_encoder_for_audit_data():
    import pyarrow as pa
    from test_data import SPEC, TABLE

    from aequum.engines.core.data import AuditData

    complete = TABLE.set_column(TABLE.column_names.index("income"), "income", pa.array([10.0, 20.0, 30.0]))
    data = AuditData(SPEC, complete, categories={"city": ["x", "y"]})
    enc = encoder_for(data)
    assert enc.columns == ["income", "grade", "city=x", "city=y"]
    assert np.array_equal(enc.inverse(enc.transform(data.feature_values())), data.feature_values())
