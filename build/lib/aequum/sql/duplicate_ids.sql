-- Later occurrences of a record id already seen at a smaller source row (the first is kept).
SELECT _row AS source_row, _id AS record_id,
       'duplicate id (first seen at source row ' || first_row || ')' AS reason
FROM (
    SELECT _row, _id, min(_row) OVER (PARTITION BY _id) AS first_row
    FROM staged_batch
)
WHERE _row <> first_row
ORDER BY _row;
