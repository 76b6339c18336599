-- Runs, newest first, with per-engine status folded in.
SELECT r.run_id, r.spec_name, r.dataset_version, r.status,
       r.started_at, r.finished_at,
       round(date_diff('millisecond', r.started_at, r.finished_at) / 1000.0, 1) AS seconds,
       coalesce(string_agg(e.engine || ':' || e.status, ', ' ORDER BY e.engine), '') AS engines,
       r.error
FROM audit.runs r
LEFT JOIN audit.run_engines e USING (run_id)
WHERE $spec_name IS NULL OR r.spec_name = $spec_name
GROUP BY ALL
ORDER BY r.started_at DESC
LIMIT $limit;
