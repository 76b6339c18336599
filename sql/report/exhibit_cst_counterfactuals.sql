-- The counterfactual points of the exhibit's complainants ($ids), as the CST engine stored them
-- (audit.cst_counterfactuals): each distance feature's raw value in the world do(A := reference)
-- (ordinals and categories also as their level), and the counterfactual decision; the
-- complainants in the order of $ids, the features in the distance's order (as stored).
WITH wanted AS (
  SELECT unnest($ids::VARCHAR[]) AS record_id, generate_subscripts($ids::VARCHAR[], 1) AS position
)
SELECT c.record_id, c.feature, c.value, c.level, c.decision_counterfactual
FROM audit.cst_counterfactuals c JOIN wanted w USING (record_id)
WHERE c.run_id = $run_id AND c.protected_attribute = $attribute
ORDER BY w.position;
