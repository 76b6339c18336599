-- The finished runs without rows in audit.group_labels (written before that table existed):
-- flows/store/group_labels.py labels them when the warehouse is opened for writing.
SELECT r.run_id
FROM audit.runs r
WHERE r.status IN ('succeeded', 'partial')
  AND NOT EXISTS (SELECT 1 FROM audit.group_labels g WHERE g.run_id = r.run_id)
ORDER BY r.run_id;
