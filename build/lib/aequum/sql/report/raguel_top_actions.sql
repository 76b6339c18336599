-- RAGUEL's suggested actions for one attribute and algorithm: the $limit costliest (the rest
-- stay in audit.raguel_actions).
SELECT record_id, group_name, feature, value_before, value_after, steps, cost_before, cost_after,
       modification_cost, overtakes
FROM audit.raguel_actions
WHERE run_id = $run_id AND attribute = $attribute AND algorithm = $algorithm
ORDER BY modification_cost DESC, record_id, feature
LIMIT $limit;
