-- The price part of audit.input_strength (sql/views/input_strength.sql): each control's partial
-- R-squared in the pricing engine's OLS of each field (audit.pricing_input_strength), the
-- controls taken together left out.
CREATE OR REPLACE VIEW audit.input_strength_pricing AS
SELECT run_id, attribute, field AS outcome, control, r2dxj_x AS r2_group, r2yxj_dx AS r2_outcome
FROM audit.pricing_input_strength
WHERE control <> 'the observed controls together';
