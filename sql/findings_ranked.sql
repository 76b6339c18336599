-- audit.findings with each finding's rank in its run (1 first), for BI tools and the report:
-- evidence on the audit's question first, then flagged findings (something wrong with the
-- audited decisions), then headline rows; within each, the more certain (smaller p-value) and
-- the more individuals first. Detection quality (of the audit itself) comes after every finding
-- about the decisions. Warehouse.create_views writes the union of the engines' parts to
-- audit.all_findings and then runs this file.
CREATE OR REPLACE VIEW audit.findings AS
SELECT f.*,
       row_number() OVER (
         PARTITION BY f.run_id
         ORDER BY f.evidence DESC NULLS LAST, f.flagged DESC NULLS LAST, f.headline DESC NULLS LAST,
                  f.estimand = 'detection quality', f.p_value ASC NULLS LAST,
                  f.individuals DESC NULLS LAST, f.engine, f.attribute, f.group_name, f.finding
       ) AS rank
FROM audit.all_findings f;
