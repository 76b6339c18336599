-- Lenders' names (audit.lender_panel, `aequum panel`) of the run's per-lender rows.
SELECT DISTINCT p.lei, p.name
FROM audit.lender_panel p
JOIN audit.lender_disparities d ON d.lei = p.lei
WHERE d.run_id = $run_id;
