-- Distribution of delta_p over all complainants of one attribute, method and k, in bins of
-- 0.1 from -1 to 1, split by significance (the report's histogram; one pass over the claims).
SELECT least(greatest(floor(delta_p * 10), -10), 9) / 10.0 AS bin, significant, count(*) AS claims
FROM audit.cst_claims
WHERE run_id = $run_id AND protected_attribute = $attribute AND method = $method AND k = $k
  AND delta_p IS NOT NULL
GROUP BY ALL
ORDER BY bin, significant;
