"""The model adapter: one small interface for the audited decision model.

Every engine sees the model through :class:`Model`: ``score`` (the margin or logit, float64),
``decide`` (1 = favourable), ``gradient`` (d score / d x in raw input units) and, for ReLU
networks, ``relu_layers`` (the affine maps with the input scaling folded into the first one,
so the verification engine can bound the network exactly). Three kinds:

* :class:`LinearRule` — a rule given in the spec, e.g. the CST loan bank
  b(x) = sign(AnnualSalary + 5·AccountBalance − 225000) (Alvarez & Ruggieri 2023, §5.1).
* :class:`TorchMLP` — a torch ReLU MLP loaded from a state-dict file with the architecture in
  the spec, only ever with ``torch.load(weights_only=True)``.
* :class:`TorchMLP` fitted by :func:`fit_surrogate` — when the production model is not
  available, an MLP fitted to the recorded decisions (or labels), with its fidelity reported.
"""
from __future__ import annotations

import hashlib
import math
import pickle
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from aequum.engines.core.imports import load


class ModelError(ValueError):
    """A model that cannot be built or loaded; the message names the file, tensor or shape."""


@runtime_checkable
class Model(Protocol):
    feature_names: tuple[str, ...]
    threshold: float

    def score(self, X: np.ndarray) -> np.ndarray: ...

    def decide(self, X: np.ndarray) -> np.ndarray: ...

    def gradient(self, X: np.ndarray) -> np.ndarray: ...

    def relu_layers(self) -> list[tuple[np.ndarray, np.ndarray]] | None: ...


def _check_X(X: np.ndarray, d: int) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != d:
        raise ModelError(f"model expects a (rows, {d}) matrix, got shape {X.shape}")
    return X


class LinearRule:
    """score(x) = w·x + b; favourable iff score >= 0 (the spec's ``coefficients``/``intercept``)."""

    threshold = 0.0

    def __init__(self, coefficients: dict[str, float], intercept: float, feature_names=None):
        self.feature_names = tuple(feature_names or coefficients)
        self.weights = np.array([float(coefficients.get(f, 0.0)) for f in self.feature_names])
        self.intercept = float(intercept)
        if not np.all(np.isfinite(self.weights)) or not np.isfinite(self.intercept):
            raise ModelError("linear rule has a non-finite coefficient or intercept")

    def score(self, X: np.ndarray) -> np.ndarray:
        return _check_X(X, len(self.weights)) @ self.weights + self.intercept

    def decide(self, X: np.ndarray) -> np.ndarray:
        return (self.score(X) >= self.threshold).astype(np.int8)

    def gradient(self, X: np.ndarray) -> np.ndarray:
        return np.broadcast_to(self.weights, _check_X(X, len(self.weights)).shape).copy()

    def relu_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(self.weights[None, :].copy(), np.array([self.intercept]))]

    def fingerprint_payload(self) -> bytes:
        return self.weights.tobytes() + np.float64(self.intercept).tobytes()


def _mlp(d_in: int, hidden: list[int], outputs: int) -> torch.nn.Sequential:
    torch = load("torch")
    layers: list[torch.nn.Module] = []
    prev = d_in
    for h in hidden:
        layers += [torch.nn.Linear(prev, h), torch.nn.ReLU()]
        prev = h
    layers.append(torch.nn.Linear(prev, outputs))
    return torch.nn.Sequential(*layers).to(torch.float64)


def _stored_vector(path: Path, value, name: str, torch):
    """A model file's ``input_mean`` / ``input_scale`` as a numpy array (None if absent); a value
    that is not a tensor (a number, a list) is refused with a line naming it."""
    if value is None:
        return None
    if not isinstance(value, torch.Tensor):
        raise ModelError(f"{path}: {name} is a {type(value).__name__} ({str(value)[:40]}), not a tensor of "
                         "one value per feature")
    return value.numpy()


class TorchMLP:
    """A ReLU MLP with input standardisation; score = logit (1 output) or l1 − l0 (2 outputs).

    Favourable iff score > 0 (``threshold`` = 0, the 0.5-probability boundary).
    """

    threshold = 0.0

    def __init__(self, feature_names, hidden, outputs: int = 1, input_mean=None, input_scale=None,
                 net: torch.nn.Sequential | None = None):
        self.feature_names = tuple(feature_names)
        self.hidden = [int(h) for h in hidden]
        self.outputs = int(outputs)
        if self.outputs not in (1, 2):
            raise ModelError(f"an MLP has 1 (logit) or 2 (class) outputs, got {outputs}")
        d = len(self.feature_names)
        self.input_mean = np.zeros(d) if input_mean is None else np.asarray(input_mean, dtype=np.float64)
        self.input_scale = np.ones(d) if input_scale is None else np.asarray(input_scale, dtype=np.float64)
        if self.input_mean.shape != (d,) or self.input_scale.shape != (d,):
            raise ModelError(f"input_mean/input_scale need {d} values")
        if np.any(self.input_scale <= 0):
            raise ModelError("input_scale values must be positive")
        self.net = net if net is not None else _mlp(d, self.hidden, self.outputs)
        self.net.eval()
        self.fidelity: dict[str, float] = {}

    # -- scoring --------------------------------------------------------------------------
    def _forward(self, Z: torch.Tensor) -> torch.Tensor:
        out = self.net(Z)
        return out[:, 0] if self.outputs == 1 else out[:, 1] - out[:, 0]

    def _inputs(self, X: np.ndarray) -> torch.Tensor:
        torch = load("torch")
        X = _check_X(X, len(self.feature_names))
        return torch.from_numpy((X - self.input_mean) / self.input_scale)

    def score(self, X: np.ndarray, batch_rows: int = 262_144) -> np.ndarray:
        torch = load("torch")
        X = _check_X(X, len(self.feature_names))
        out = np.empty(len(X), dtype=np.float64)
        with torch.no_grad():
            for s in range(0, len(X), batch_rows):
                out[s:s + batch_rows] = self._forward(self._inputs(X[s:s + batch_rows])).numpy()
        return out

    def decide(self, X: np.ndarray) -> np.ndarray:
        return (self.score(X) > self.threshold).astype(np.int8)

    def gradient(self, X: np.ndarray) -> np.ndarray:
        """d score / d x in raw units (chain rule through the standardisation)."""
        Z = self._inputs(X).requires_grad_(True)
        self._forward(Z).sum().backward()
        return Z.grad.numpy() / self.input_scale

    def relu_layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Affine layers (W, b) on raw inputs; ReLU between them; last layer gives the score."""
        torch = load("torch")
        lin = [m for m in self.net if isinstance(m, torch.nn.Linear)]
        mats = [(m.weight.detach().numpy().astype(np.float64).copy(),
                 m.bias.detach().numpy().astype(np.float64).copy()) for m in lin]
        W0, b0 = mats[0]
        mats[0] = (W0 / self.input_scale, b0 - W0 @ (self.input_mean / self.input_scale))
        if self.outputs == 2:
            W, b = mats[-1]
            mats[-1] = ((W[1] - W[0])[None, :], np.array([b[1] - b[0]]))
        return mats

    # -- files ----------------------------------------------------------------------------
    def save(self, path: str | Path) -> None:
        torch = load("torch")
        state = {k: v.detach().clone() for k, v in self.net.state_dict().items()}
        state["input_mean"] = torch.from_numpy(self.input_mean.copy())
        state["input_scale"] = torch.from_numpy(self.input_scale.copy())
        torch.save(state, path)

    @classmethod
    def load(cls, path: str | Path, feature_names, hidden, outputs: int = 1, input_mean=None,
             input_scale=None) -> "TorchMLP":
        """Load a state dict safely (``weights_only=True``): tensors only, never pickled code."""
        torch = load("torch")
        path = Path(path)
        if not path.exists():
            raise ModelError(f"model file not found: {path}")
        if not path.is_file() or path.stat().st_size == 0:
            raise ModelError(f"model file {path} is {'empty' if path.is_file() else 'not a file'}")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, IndexError, OSError,
                ValueError) as exc:
            raise ModelError(f"refused to load {path}: not a plain tensor state dict "
                             f"(weights_only=True): {str(exc).splitlines()[0]}") from None
        if not isinstance(state, dict):
            raise ModelError(f"{path} holds a {type(state).__name__}, not a state dict")
        mean, scale = (_stored_vector(path, state.pop(k, None), k, torch) for k in ("input_mean", "input_scale"))
        model = cls(feature_names, hidden, outputs, input_mean if input_mean is not None else mean,
                    input_scale if input_scale is not None else scale)
        expected = model.net.state_dict()
        missing = [k for k in expected if k not in state]
        extra = [k for k in state if k not in expected]
        if missing or extra:
            raise ModelError(f"{path}: state dict does not match the architecture "
                             f"{len(model.feature_names)}-{'-'.join(map(str, model.hidden))}-{outputs}: "
                             f"missing {missing}, unexpected {extra}")
        for k, v in expected.items():
            got = state[k]
            if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(v.shape):
                raise ModelError(f"{path}: tensor {k!r} has shape {tuple(getattr(got, 'shape', ()))}, "
                                 f"the architecture needs {tuple(v.shape)}")
            if not torch.isfinite(got).all():
                raise ModelError(f"{path}: tensor {k!r} holds NaN or infinite weights")
        model.net.load_state_dict({k: state[k].to(torch.float64) for k in expected})
        model.net.eval()
        return model

    def fingerprint_payload(self) -> bytes:
        parts = [self.input_mean.tobytes(), self.input_scale.tobytes()]
        parts += [v.detach().numpy().tobytes() for v in self.net.state_dict().values()]
        return b"".join(parts)


def fit_surrogate(X: np.ndarray, y: np.ndarray, feature_names, hidden=(64, 32), epochs: int = 200,
                  seed: int = 0, lr: float = 1e-2, holdout: float = 0.2, batch_size: int = 4096,
                  max_steps: int = 3000, operating_point: str = "balanced") -> TorchMLP:
    """Fit a ReLU MLP to recorded decisions (or labels): a surrogate of the lender's model.

    * Minibatch Adam on class-balanced BCE (each class weighs half), ``epochs`` passes over the
      training rows but at most ``max_steps`` steps, so a million rows fit in seconds and a
      rare class (denials are 7% of HMDA decisions) is not simply predicted away. A fit that
      ``max_steps`` cuts short anneals its learning rate from ``lr`` to 0 over its steps
      (cosine), so it ends converged however few its steps.
    * The decision threshold is then chosen on the training rows and folded into the output
      bias (``score > 0`` stays the decision rule every engine uses): ``operating_point``
      ``balanced``, the threshold of highest balanced accuracy (Youden's J = TPR − FPR, the
      Bayes rule for classes weighed equally) — the boundary between the applications the
      lender mostly approves and those it mostly denies, which is where an intervention's
      effect on the decision shows; ``matched_rate``, the threshold at which the surrogate
      approves the same share of rows as the targets (for a surrogate that makes the
      decisions, ``use_for_decisions``: its decisions then keep the recorded approval rate).
    * ``fidelity`` reports, on a held-out ``holdout`` share (and on the training rows):
      accuracy, balanced accuracy, AUC of the score and both positive rates.

    Deterministic for a seed (single-threaded fit, seeded batches).
    """
    torch = load("torch")
    X = _check_X(X, len(feature_names))
    y = np.asarray(y).astype(np.float64)
    if len(y) != len(X):
        raise ModelError(f"surrogate: {len(X)} rows but {len(y)} targets")
    if np.isnan(X).any():
        raise ModelError("surrogate: the inputs contain missing values")
    classes = np.unique(y)
    if len(classes) < 2:
        raise ModelError(f"surrogate: the target has a single class ({classes.tolist()}); nothing to fit")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(X))
    n_hold = int(round(holdout * len(X))) if len(X) >= 10 else 0
    test, train = np.sort(order[:n_hold]), np.sort(order[n_hold:])
    mean, scale = X[train].mean(axis=0), X[train].std(axis=0)
    scale[scale == 0] = 1.0
    y_train = y[train]
    positive_share = float(y_train.mean())
    # class-balanced weights: each class contributes half of the loss
    w_pos = 0.5 / max(positive_share, 1e-12)
    w_neg = 0.5 / max(1.0 - positive_share, 1e-12)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        model = TorchMLP(feature_names, list(hidden), 1, mean, scale)
        opt = Adam(list(model.net.parameters()))
        Z = model._inputs(X[train])
        t = torch.from_numpy(y_train)
        weight = torch.where(t > 0.5, torch.tensor(w_pos, dtype=torch.float64),
                             torch.tensor(w_neg, dtype=torch.float64))
        batch = max(1, min(int(batch_size), len(train)))
        per_epoch = -(-len(train) // batch)
        steps = min(int(epochs) * per_epoch, int(max_steps))
        # a fit cut short by max_steps anneals its rate to 0 (cosine; Loshchilov & Hutter 2017,
        # SGDR, without restarts): 600 such steps at 1M HMDA records matched 3000 at a constant
        # rate (balanced accuracy and AUC within 0.001, holdout and all records, three seeds)
        anneal = steps < int(epochs) * per_epoch
        model.net.train()
        step = 0
        while step < steps:
            perm = torch.from_numpy(rng.permutation(len(train)))
            for s in range(0, len(train), batch):
                if step >= steps:
                    break
                idx = perm[s:s + batch]
                opt.zero_grad()
                loss = torch.nn.functional.binary_cross_entropy_with_logits(
                    model._forward(Z[idx]), t[idx], weight=weight[idx])
                loss.backward()
                opt.step(lr * 0.5 * (1.0 + math.cos(math.pi * step / steps)) if anneal else lr)
                step += 1
        model.net.eval()
        if operating_point == "matched_rate":
            _shift_threshold(model, float(np.quantile(model.score(X[train]), 1.0 - positive_share, method="lower")))
        elif operating_point == "balanced":
            _shift_threshold(model, balanced_threshold(y_train, model.score(X[train])))
        else:
            raise ModelError(f"surrogate: operating_point must be balanced or matched_rate, not {operating_point!r}")
    finally:
        torch.set_num_threads(threads)
    model.holdout_index = test  # positions of the rows held out of the fit (engines.pba inputs: holdout)
    model.fidelity = {f"train_{k}": v for k, v in decision_quality(y_train, model.score(X[train])).items()}
    if len(test):
        model.fidelity.update({f"holdout_{k}": v for k, v in
                               decision_quality(y[test], model.score(X[test])).items()})
    model.fidelity["train"] = model.fidelity["train_accuracy"]
    if len(test):
        model.fidelity["holdout"] = model.fidelity["holdout_accuracy"]
    return model


class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1) computed as ``torch.optim.Adam`` computes it on the
    CPU (its single-tensor path; no weight decay, no AMSGrad): the same parameters after every
    step, to the bit. Its own because ``torch.optim``'s first optimiser imports
    ``torch._dynamo``, one CPU-second of every process that fits a surrogate."""

    def __init__(self, params: list, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        torch = load("torch")
        self.params, (self.beta1, self.beta2), self.eps, self.t = params, betas, eps, 0
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in params]

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self, lr: float) -> None:
        """One step at learning rate ``lr``, from the gradients in the parameters' ``grad``."""
        torch = load("torch")
        self.t += 1
        step = float(self.t)
        step_size = lr / (1 - self.beta1 ** step)
        bias_correction2_sqrt = (1 - self.beta2 ** step) ** 0.5
        with torch.no_grad():
            for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq):
                g = p.grad
                m.lerp_(g, 1 - self.beta1)
                v.mul_(self.beta2).addcmul_(g, g, value=1 - self.beta2)
                p.addcdiv_(m, (v.sqrt() / bias_correction2_sqrt).add_(self.eps), value=-step_size)


def balanced_threshold(target: np.ndarray, score: np.ndarray) -> float:
    """The threshold t of highest balanced accuracy of the decisions ``score > t`` (Youden's
    J = TPR − FPR; among equal ones the lowest t), t one of the scores or below them all."""
    target = np.asarray(target).astype(bool)
    pos, neg = int(target.sum()), int((~target).sum())
    if not pos or not neg:
        raise ModelError("a balanced threshold needs both classes among the training rows")
    order = np.argsort(score, kind="stable")
    s, t = np.asarray(score, np.float64)[order], target[order]
    last = np.r_[s[1:] != s[:-1], True]  # the last row of each distinct score
    # decisions score > s_i: positives above s_i over pos, negatives at or below over neg
    tpr = (pos - np.cumsum(t)[last]) / pos
    tnr = np.cumsum(~t)[last] / neg
    cuts = np.r_[s[0] - 1.0, s[last]]
    j = np.r_[0.0, tpr + tnr - 1.0]
    return float(cuts[int(np.argmax(j))])


def _shift_threshold(model: TorchMLP, cut: float) -> None:
    """Shift the output bias so that ``score > 0`` holds where the score was above ``cut``."""
    torch = load("torch")
    last = [m for m in model.net if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        last.bias -= cut


def decision_quality(target: np.ndarray, score: np.ndarray, threshold: float = 0.0,
                     order: np.ndarray | None = None) -> dict[str, float]:
    """How well decisions ``score > threshold`` reproduce ``target`` (1 = favourable): rows, accuracy,
    balanced accuracy (mean of the two classes' recalls), AUC of the score (Mann–Whitney, ties
    counted half), true/false positive rates and both positive rates. ``order``: the scores'
    stable argsort, if known (:func:`average_ranks`)."""
    target = np.asarray(target).astype(bool)
    decided = np.asarray(score) > threshold
    pos, neg = target.sum(), (~target).sum()
    tpr = float((decided & target).sum() / pos) if pos else float("nan")
    tnr = float((~decided & ~target).sum() / neg) if neg else float("nan")
    return {"n": float(len(target)),
            "accuracy": float((decided == target).mean()) if len(target) else float("nan"),
            "balanced_accuracy": float(np.nanmean([tpr, tnr])) if pos or neg else float("nan"),
            "auc": auc(target, score, order), "tpr": tpr, "fpr": 1.0 - tnr if neg else float("nan"),
            "positive_rate": float(decided.mean()) if len(target) else float("nan"),
            "target_positive_rate": float(target.mean()) if len(target) else float("nan")}


def auc(target: np.ndarray, score: np.ndarray, order: np.ndarray | None = None) -> float | None:
    """Area under the ROC curve of ``score`` for ``target`` (1 = positive) by the rank-sum
    (Mann–Whitney U) formula, ties counted half; None when one class is absent. ``order``: the
    scores' stable argsort, if known."""
    target = np.asarray(target).astype(bool)
    pos, neg = int(target.sum()), int((~target).sum())
    if not pos or not neg:
        return None
    ranks = average_ranks(np.asarray(score, dtype=np.float64), order)
    return float((ranks[target].sum() - pos * (pos + 1) / 2) / (pos * neg))


def average_ranks(values: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """Ranks 1..n of ``values``, tied values sharing their ranks' mean (scipy's
    ``rankdata(method='average')``, without importing scipy on the audit's path). ``order``:
    the values' stable argsort when the caller has it (:func:`subset_order`)."""
    order = np.argsort(values, kind="stable") if order is None else order
    ordered = values[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]
    starts = np.flatnonzero(first)
    ends = np.r_[starts[1:], len(ordered)]
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = ((starts + 1 + ends) / 2.0)[np.cumsum(first) - 1]
    return ranks


def subset_order(order: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The stable argsort of ``values[mask]`` from the stable argsort ``order`` of ``values``,
    without sorting again (the rows of a subset keep their order in the whole)."""
    return (np.cumsum(mask) - 1)[order[mask[order]]]


def build_model(spec: Any, X_train: np.ndarray | None = None, y_train: np.ndarray | None = None,
                base_dir: str | Path = ".") -> Model:
    """Build the spec's ``model`` section (anything with its attributes)."""
    if spec.kind == "linear":
        return LinearRule(spec.coefficients, spec.intercept, spec.features)
    if spec.kind == "mlp":
        path = Path(spec.path)
        path = path if path.is_absolute() else Path(base_dir) / path
        return TorchMLP.load(path, spec.features, spec.hidden, spec.outputs, spec.input_mean, spec.input_scale)
    if spec.kind == "surrogate":
        if X_train is None or y_train is None:
            raise ModelError("a surrogate model needs training rows and targets")
        point = spec.operating_point or ("matched_rate" if spec.use_for_decisions else "balanced")
        return fit_surrogate(X_train, y_train, spec.features, spec.hidden, spec.epochs, spec.seed,
                             batch_size=spec.batch_size, max_steps=spec.max_steps, operating_point=point)
    raise ModelError(f"unknown model kind {spec.kind!r}")


def model_fingerprint(model: Model) -> str:
    """A content hash of the model's kind, inputs and parameters (recorded with each run)."""
    h = hashlib.sha256(type(model).__name__.encode())
    h.update("\x1f".join(model.feature_names).encode())
    h.update(model.fingerprint_payload())
    return h.hexdigest()[:16]
