-- About $points complainants of one attribute, method and k for the report's delta_p-with-
-- interval plot: a deterministic sample (by a hash of the record id, one scan, no sort of all
-- claims), ranked by delta_p; total is the number of complainants sampled from.
WITH c AS (
  SELECT record_id, delta_p, ci_low, ci_high, significant
  FROM audit.cst_claims
  WHERE run_id = $run_id AND protected_attribute = $attribute AND method = $method AND k = $k
    AND delta_p IS NOT NULL
), n AS (
  SELECT count(*) AS total FROM c
), s AS (
  SELECT c.*, n.total FROM c, n
  WHERE hash(c.record_id) % greatest(1, n.total // $points)::UBIGINT = 0
  ORDER BY c.delta_p, c.record_id
  LIMIT 2 * $points
)
SELECT record_id, delta_p, ci_low, ci_high, significant,
       row_number() OVER (ORDER BY delta_p, record_id) - 1 AS position,
       count(*) OVER () AS sampled, total
FROM s
ORDER BY position;
