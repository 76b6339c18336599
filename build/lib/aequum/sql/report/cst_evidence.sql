-- Who was compared with whom, for the listed complainants of one attribute: per complainant,
-- centre (factual / counterfactual) and search group (control / test), the group's size, its
-- five nearest members with their distances, and the farthest distance.
WITH e AS (
  SELECT record_id, centre, search_group, count(*) AS members,
         string_agg(neighbour_id || ' (' || printf('%.3f', distance) || ')', ', ' ORDER BY rank)
           FILTER (WHERE rank <= 5) AS nearest,
         max(distance) AS farthest
  FROM audit.cst_evidence
  WHERE run_id = $run_id AND protected_attribute = $attribute AND list_contains($ids, record_id)
  GROUP BY record_id, centre, search_group
)
SELECT * FROM e
ORDER BY list_position($ids, record_id), centre, search_group;
