-- Add or replace lenders' names (audit.lender_panel) from the registered Arrow table panel_rows
-- (lei, name); $source: the file they were read from.
INSERT OR REPLACE INTO audit.lender_panel SELECT lei, name, $source FROM panel_rows;
