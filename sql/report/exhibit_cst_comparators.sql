-- Who the exhibit's complainants ($ids) were compared with at k = $k, as the CST engine stored
-- it (audit.cst_evidence): the control group (the complainant's own group around its factual
-- inputs) and the test group of the method ($test_centre: 'factual' for ST, the reference
-- members nearest the complainant's own inputs; 'counterfactual' for CST, those nearest its
-- counterfactual), ranks 1 to k, nearest first, in the order of $ids.
WITH wanted AS (
  SELECT unnest($ids::VARCHAR[]) AS record_id, generate_subscripts($ids::VARCHAR[], 1) AS position
)
SELECT e.record_id, e.centre, e.search_group, e.rank, e.neighbour_id, e.distance
FROM audit.cst_evidence e JOIN wanted w USING (record_id)
WHERE e.run_id = $run_id AND e.protected_attribute = $attribute AND e.rank <= $k
  AND (e.search_group = 'control' OR e.centre = $test_centre)
ORDER BY w.position, e.search_group, e.rank;
