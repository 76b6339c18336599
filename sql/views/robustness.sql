-- The group-level test and sensitivity analysis of each run x attribute, from the regression
-- engine (audit.regression_estimates; engines/regression). The test is the denial logit's
-- (adjusted p; significant against the protected group with an odds ratio above 1); where the
-- logit could not be fitted (its note says why) there is none, for the linear probability model
-- is not one (it misreads a threshold rule); rows written before the logit existed have
-- neither, and keep the linear model's. Beside it: whether the controlled disparity survives an
-- unobserved confounder robust_multiplier times as strong as the observed controls (robust,
-- Cinelli & Hazlett 2020) and its robustness value RV_{1,alpha}. Replaces the empty
-- audit.robustness of findings.sql when that table exists; the regression and CST findings read
-- it: an individual direct-effect finding is evidence only when its group's test is significant.
CREATE OR REPLACE VIEW audit.robustness AS
SELECT run_id, attribute, robust, rv_q1_alpha AS robustness_value, strongest_control,
       CASE WHEN logit_coefficient IS NOT NULL THEN logit_p_adjusted
            WHEN logit_note IS NOT NULL THEN NULL ELSE p_adjusted END AS group_p_value,
       CASE WHEN logit_coefficient IS NOT NULL THEN logit_significant
            WHEN logit_note IS NOT NULL THEN NULL ELSE significant END AS group_tested,
       CASE WHEN logit_coefficient IS NOT NULL THEN coalesce(logit_significant AND odds_ratio > 1, false)
            WHEN logit_note IS NOT NULL THEN false
            ELSE coalesce(significant AND estimate > 0, false) END AS group_significant
FROM audit.regression_estimates;
