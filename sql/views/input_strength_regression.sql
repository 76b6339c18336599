-- The denial part of audit.input_strength (sql/views/input_strength.sql): each control's partial
-- R-squared in the linear probability model of audit.regression_benchmarks (the same at every
-- multiplier), the controls taken together left out.
CREATE OR REPLACE VIEW audit.input_strength_regression AS
SELECT DISTINCT run_id, attribute, 'denial' AS outcome, control, r2dxj_x AS r2_group, r2yxj_dx AS r2_outcome
FROM audit.regression_benchmarks
WHERE control <> 'the observed controls together';
