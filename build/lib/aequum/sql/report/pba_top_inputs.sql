-- PBA cases: the verified inputs of one attribute, group and setting at one delta with the
-- largest proven margin (lower bound of the objective), at most $limit.
SELECT record_id, group_name, setting, presented_group, delta, truth, decision, twin_decision,
       objective, lower_bound, upper_bound, verdict, method
FROM audit.pba_inputs
WHERE run_id = $run_id AND attribute = $attribute AND group_name = $group_name
  AND setting = $setting AND delta = $delta AND verdict = 'verified'
ORDER BY lower_bound DESC NULLS LAST, record_id
LIMIT $limit;
