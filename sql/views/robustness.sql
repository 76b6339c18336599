-- The sensitivity analysis of each run x attribute, from the regression engine
-- (audit.regression_estimates; engines/sensitivity.py): whether the controlled disparity
-- survives an unobserved confounder as strong as the strongest observed control, and its
-- robustness value RV_{1,alpha} (Cinelli & Hazlett 2020). Replaces the empty audit.robustness
-- of findings.sql when that table exists; the CST findings read it.
CREATE OR REPLACE VIEW audit.robustness AS
SELECT run_id, attribute, robust, rv_q1_alpha AS robustness_value, strongest_control
FROM audit.regression_estimates;
