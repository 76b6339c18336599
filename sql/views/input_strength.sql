-- audit.input_strength: per run x tested unit x outcome x recorded control, how strongly the
-- control is tied to group membership (r2_group: its partial R-squared with the group given the
-- other controls) and to the outcome (r2_outcome: with denial, or with a price, given group and
-- the other controls). On a lender's internal records that hold an input the public data lack
-- (the credit score), these are the figures a bound on that input needs in the public-data
-- screening (decision.bounds; `aequum bounds` prints them as spec entries). Each engine adds
-- its part (input_strength_regression, input_strength_pricing); Warehouse.create_views replaces
-- this empty view by the union of the parts whose tables exist.
CREATE OR REPLACE VIEW audit.input_strength AS
SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS VARCHAR) AS attribute, CAST(NULL AS VARCHAR) AS outcome,
       CAST(NULL AS VARCHAR) AS control, CAST(NULL AS DOUBLE) AS r2_group, CAST(NULL AS DOUBLE) AS r2_outcome
WHERE false;
