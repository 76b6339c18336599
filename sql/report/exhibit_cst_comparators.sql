-- Who the exhibit's complainants ($ids) were compared with at k = $k, as the CST engine stored
-- it (audit.cst_evidence): the control group (the complainant's own group around its factual
-- inputs) and the test group of the method ($test_centre: 'factual' for ST, the reference
-- members nearest the complainant's own inputs; 'counterfactual' for CST, those nearest its
-- counterfactual), ranks 1 to k, nearest first.
SELECT record_id, centre, search_group, rank, neighbour_id, distance
FROM audit.cst_evidence
WHERE run_id = $run_id AND protected_attribute = $attribute AND list_contains($ids, record_id)
  AND rank <= $k AND (search_group = 'control' OR centre = $test_centre)
ORDER BY list_position($ids, record_id), search_group, rank;
