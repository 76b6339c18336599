-- About $points complainants of one attribute, method and k spread evenly over the ranking by
-- delta_p (every step-th in delta_p order), for the report's delta_p-with-interval plot.
WITH c AS (
  SELECT record_id, delta_p, ci_low, ci_high, significant,
         row_number() OVER (ORDER BY delta_p, record_id) - 1 AS position,
         count(*) OVER () AS total
  FROM audit.cst_claims
  WHERE run_id = $run_id AND protected_attribute = $attribute AND method = $method AND k = $k
    AND delta_p IS NOT NULL
)
SELECT record_id, delta_p, ci_low, ci_high, significant, position, total
FROM c
WHERE position % greatest(1, total // $points) = 0
ORDER BY position;
