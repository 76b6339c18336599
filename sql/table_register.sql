-- Register a result table as aequum's (audit.aequum_tables).
INSERT OR IGNORE INTO audit.aequum_tables VALUES ($table_name, 'result');
