-- RAGUEL's ranked list out of core: every record of a staged lake priced by Eq. 2 (weighted
-- distance to the linear boundary a·x + b = 0) and ordered by ascending cost; DuckDB spills the
-- sort to disk under its memory limit. {features} / {group} / {margin} / {filter} are filled
-- with quoted identifiers only; the coefficients, intercept and norm are bound parameters:
--   $1 lake glob, $2 intercept b, $3 norm √(Σ a_j²/w_j), then one coefficient per feature.
SELECT record_id, "group", cost, {features}
FROM (
    SELECT CAST(_id AS VARCHAR) AS record_id,
           CAST(CASE {group} WHEN 1 THEN 0 WHEN 0 THEN 1 ELSE 2 END AS TINYINT) AS "group",
           greatest(-({margin} + $2), 0.0) / $3 AS cost,
           {features}
    FROM read_parquet($1, hive_partitioning = false)
    WHERE {filter}
)
ORDER BY cost, record_id
