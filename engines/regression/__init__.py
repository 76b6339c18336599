"""Controlled disparity: the denial difference between groups after controlling for recorded
inputs (a linear probability model), with its sensitivity to an omitted variable."""
