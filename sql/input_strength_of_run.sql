-- One control's strength in one run (audit.input_strength), or in the latest run that measured it
-- ($run_id null): the figures `aequum bounds` prints as decision.bounds entries.
WITH chosen AS (
    SELECT s.run_id
    FROM audit.input_strength s JOIN audit.runs r USING (run_id)
    WHERE s.control = $control AND ($run_id IS NULL OR s.run_id = $run_id) AND r.status = 'succeeded'
    ORDER BY r.started_at DESC
    LIMIT 1)
SELECT s.run_id, r.spec_name, r.started_at, s.attribute, s.outcome, s.r2_group, s.r2_outcome
FROM audit.input_strength s
JOIN chosen USING (run_id)
JOIN audit.runs r USING (run_id)
WHERE s.control = $control
ORDER BY s.outcome <> 'denial', s.outcome, s.attribute;
