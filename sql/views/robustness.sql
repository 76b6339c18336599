-- The group-level test and sensitivity analysis of each run x attribute, from the regression
-- engine (audit.regression_estimates; engines/regression, engines/sensitivity.py): whether the
-- controlled disparity is significant against the protected group (the denial logit's
-- adjusted p and odds ratio above 1; none where the logit could not be fitted), whether it survives an unobserved confounder robust_multiplier times as strong
-- as the observed controls (robust, Cinelli & Hazlett 2020), and its robustness value
-- RV_{1,alpha}. Replaces the empty audit.robustness of findings.sql when that table exists; the
-- CST findings read it: an individual direct-effect finding is evidence only when its group's
-- controlled disparity is significant too.
CREATE OR REPLACE VIEW audit.robustness AS
SELECT run_id, attribute, robust, rv_q1_alpha AS robustness_value, strongest_control,
       CASE WHEN odds_ratio IS NOT NULL THEN coalesce(logit_significant AND odds_ratio > 1, false)
            WHEN logit_note IS NOT NULL THEN false   -- the logit could not be fitted: no test
            ELSE coalesce(significant AND estimate > 0, false) END AS group_significant
FROM audit.regression_estimates;
