"""Controlled disparity: the denial difference between groups after controlling for recorded
inputs — the denial logit (odds ratio, average marginal effect, E-value; the group-level test)
and the linear probability model with its sensitivity to an omitted variable (Cinelli &
Hazlett 2020)."""
