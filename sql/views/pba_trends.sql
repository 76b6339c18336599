-- PBA over time: one row per run x attribute x group x setting x delta: the share of the
-- group_label: the group as the report names it (audit.group_labels)
-- group's considered inputs proven persistently more confident as observed / as flipped
-- (verified, falsified and inconclusive kept apart), robustness bias, SP, TPR and CFA.
CREATE OR REPLACE VIEW audit.pba_trends AS
SELECT r.spec_name, r.started_at, s.run_id, r.dataset_version, s.attribute, s.group_name, gl.group_label,
       s.setting, s.presented_group, s.delta, s.inputs, s.sampled, s.considered, s.verified,
       s.falsified, s.inconclusive, s.pba, s.robustness, s.favourable_rate, s.tpr, s.cfa
FROM audit.pba_summary s
JOIN audit.runs r USING (run_id)
LEFT JOIN audit.group_labels gl
       ON gl.run_id = s.run_id AND gl.attribute = s.attribute AND gl.group_name = s.group_name
WHERE r.status IN ('succeeded', 'partial')
ORDER BY r.spec_name, s.attribute, s.group_name, s.setting, s.delta, r.started_at DESC;
