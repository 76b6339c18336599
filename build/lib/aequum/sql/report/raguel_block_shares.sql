-- RAGUEL: the protected group's share in each of the first $blocks blocks of $block_size of one
-- attribute's ranking by recourse cost, before (rank_before) and after re-ranking (position).
WITH r AS (
  SELECT group_name = 'protected' AS protected, rank_before // $block_size AS block_before,
         position // $block_size AS block_after
  FROM audit.raguel_ranking
  WHERE run_id = $run_id AND attribute = $attribute AND algorithm = $algorithm
    AND (rank_before < $blocks * $block_size OR position < $blocks * $block_size)
)
SELECT 'before' AS stage, block_before AS block, avg(protected::INTEGER) AS protected_share, count(*) AS size
FROM r WHERE block_before < $blocks GROUP BY ALL
UNION ALL
SELECT 'after', block_after, avg(protected::INTEGER), count(*)
FROM r WHERE block_after < $blocks GROUP BY ALL
ORDER BY stage, block;
