-- One finding of a run by its rank (audit.findings.rank: the number the report's ranked findings
-- and `aequum show findings` give it), the key `aequum report --cases` takes.
SELECT *
FROM audit.findings
WHERE run_id = $run_id AND rank = $rank;
