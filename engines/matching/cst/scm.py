"""Additive-noise structural causal models: fit, abduction, action, prediction.

Pearl's three steps as CST uses them (Alvarez & Ruggieri 2023, §3.1; Def. 3.2):
each endogenous variable follows ``X_j = f_j(pa(X_j)) + U_j`` (``log X_j = ...`` with the log
link). *Abduction* recovers ``U_j = X_j − f_j(pa(X_j))`` for every record; *action* sets the
protected attribute(s) to the reference value, do(A := a'); *prediction* recomputes the
descendants in topological order with the same ``U``. ``f_j`` is linear, either fitted by
OLS with intercept on the records (as the reference implementation does) or given explicitly.
All steps are vectorised over records.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter

import numpy as np


class SCMError(ValueError):
    """An SCM that cannot be fitted or used; the message names the variable."""


@dataclass
class Equation:
    target: str
    parents: list[str]
    link: str = "identity"                 # identity | log
    intercept: float | None = None         # set when fitted or given
    coefficients: dict[str, float] = field(default_factory=dict)


@dataclass
class LinearSCM:
    """A fitted additive-noise SCM over named variables."""

    equations: list[Equation]

    def __post_init__(self) -> None:
        graph = {eq.target: set(eq.parents) for eq in self.equations}
        try:
            self.order = [v for v in TopologicalSorter(graph).static_order() if v in graph]
        except CycleError as exc:
            raise SCMError(f"the causal graph has a cycle: {' -> '.join(map(str, exc.args[1]))}") from None
        self._by_target = {eq.target: eq for eq in self.equations}

    @property
    def targets(self) -> list[str]:
        return list(self.order)

    def variables(self) -> set[str]:
        return set(self._by_target) | {p for eq in self.equations for p in eq.parents}

    def _check(self, values: dict[str, np.ndarray]) -> int:
        missing = sorted(self.variables() - set(values))
        if missing:
            raise SCMError(f"SCM variable(s) {missing} are not in the data")
        sizes = {len(np.asarray(v)) for v in values.values()}
        if len(sizes) != 1:
            raise SCMError("SCM variables have different lengths")
        return sizes.pop()

    @staticmethod
    def _transform(eq: Equation, y: np.ndarray) -> np.ndarray:
        if eq.link == "log":
            if np.any(y[np.isfinite(y)] <= 0):
                raise SCMError(f"equation for {eq.target!r} has a log link but "
                               f"{int(np.sum(y <= 0))} non-positive values")
            return np.log(y)
        return y

    @staticmethod
    def _inverse(eq: Equation, t: np.ndarray) -> np.ndarray:
        return np.exp(t) if eq.link == "log" else t

    def _mean(self, eq: Equation, values: dict[str, np.ndarray]) -> np.ndarray:
        out = np.full(len(next(iter(values.values()))), eq.intercept, dtype=np.float64)
        for p in eq.parents:
            out += eq.coefficients.get(p, 0.0) * np.asarray(values[p], np.float64)
        return out

    @classmethod
    def fit(cls, specs: list[Equation], values: dict[str, np.ndarray],
            rows: np.ndarray | None = None) -> "LinearSCM":
        """Fit every equation without given coefficients by OLS with intercept.

        ``rows`` (bool mask) restricts the fit (e.g. to records in either protected group).
        """
        scm = cls([Equation(e.target, list(e.parents), e.link, e.intercept, dict(e.coefficients))
                   for e in specs])
        n = scm._check(values)
        use = np.ones(n, bool) if rows is None else rows.copy()
        for eq in scm.equations:
            for v in [eq.target, *eq.parents]:
                use &= np.isfinite(np.asarray(values[v], np.float64))
        for eq in scm.equations:
            if eq.intercept is not None:
                continue
            y = scm._transform(eq, np.asarray(values[eq.target], np.float64)[use])
            X = np.empty((len(y), 1 + len(eq.parents)))  # filled a column at a time: no stacked copies
            X[:, 0] = 1.0
            for j, p in enumerate(eq.parents, start=1):
                X[:, j] = np.asarray(values[p])[use]
            if use.sum() <= X.shape[1]:
                raise SCMError(f"too few records ({int(use.sum())}) to fit the equation for {eq.target!r}")
            if np.linalg.matrix_rank(X) < X.shape[1]:
                raise SCMError(f"the parents of {eq.target!r} ({eq.parents}) are collinear or constant "
                               "on the fitting records: the OLS fit is not identified")
            beta, *_ = np.linalg.lstsq(X, y, rcond=None)
            eq.intercept = float(beta[0])
            eq.coefficients = {p: float(b) for p, b in zip(eq.parents, beta[1:])}
        return scm

    def abduct(self, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Residuals U_j = t(X_j) − f_j(pa(X_j)) for every endogenous variable (abduction)."""
        self._check(values)
        return {eq.target: self._transform(eq, np.asarray(values[eq.target], np.float64))
                - self._mean(eq, values) for eq in self.equations}

    def counterfactual(self, values: dict[str, np.ndarray], do: dict[str, float | np.ndarray],
                       hold: tuple[str, ...] | list[str] = ()) -> dict[str, np.ndarray]:
        """Abduction, action do(·), prediction in topological order; returns all variables.

        ``hold``: mediators kept at their factual values — the path-specific counterfactual
        (Pearl 2001; Chiappa 2019, path-specific counterfactual fairness): the effect of do(·)
        through every path except those passing through a held variable, whose descendants
        are predicted from its factual value."""
        unknown = sorted(set(hold) - set(self._by_target))
        if unknown:
            raise SCMError(f"mediator(s) {unknown} are not targets of the SCM's equations: only a variable "
                           "the protected attribute can move can be held at its factual value")
        noise = self.abduct(values)
        out = {k: np.asarray(v, np.float64).copy() for k, v in values.items()}
        for var, val in do.items():
            if var in self._by_target:
                raise SCMError(f"do({var}) on an endogenous variable is not supported; intervene on roots")
            out[var] = np.broadcast_to(np.asarray(val, np.float64), out[var].shape).copy()
        for target in self.order:
            if target in hold:
                continue  # held at its factual value
            eq = self._by_target[target]
            out[target] = self._inverse(eq, self._mean(eq, out) + noise[target])
        return out
