-- The spec a run id belongs to (no row: a new run id).
SELECT spec_name FROM audit.runs WHERE run_id = $run_id;
