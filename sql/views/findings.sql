-- audit.findings: one tidy row per run x engine x group x finding, the table a BI dashboard,
-- a ticketing job or the HTML report reads. Each engine contributes one view,
-- sql/views/findings_<engine>.sql (audit.findings_<engine>), with exactly these columns;
-- Warehouse.create_views then replaces this empty view by the UNION ALL of the parts whose
-- tables exist. Adding an engine's findings is adding its file.
--
--   engine       the engine that found it (outcome, cst, fgce, raguel, ...)
--   attribute    protected attribute or intersection (race&sex)
--   group_name   the group the finding is about
--   finding      what kind of finding (disparate impact, counterfactual situation testing at k = 50 ...)
--   headline     the row the executive summary shows for this engine x attribute x finding kind
--   flagged      true when the finding calls for attention (a violation, a significant effect)
--   measure      the name of the headline figure; value its value
--   ci_low, ci_high, confidence   its interval and the interval's level (null when none)
--   p_value      the (adjusted, where the engine adjusts) p-value; significant at 1 - confidence
--   individuals  the number of individuals affected (the engine's count; see the statement)
--   cases_table  the audit table holding the individual cases behind the finding
--   statement    one plain-language sentence

CREATE OR REPLACE MACRO audit.pct(x) AS
    CASE WHEN x IS NULL THEN 'n/a' ELSE printf('%.1f%%', 100 * x) END;

CREATE OR REPLACE MACRO audit.num(x) AS
    CASE WHEN x IS NULL THEN 'n/a' ELSE printf('%,d', CAST(x AS BIGINT)) END;

CREATE OR REPLACE MACRO audit.pval(p) AS
    CASE WHEN p IS NULL THEN 'not tested' WHEN p < 0.001 THEN 'p < 0.001' ELSE printf('p = %.3f', p) END;

-- "the protected group of race", "race=protected & sex=reference"
CREATE OR REPLACE MACRO audit.group_label(attribute, group_name) AS
    CASE WHEN group_name = 'protected' AND contains(attribute, '=') AND NOT contains(attribute, '&')
              -- a per-value comparison (protected[].compare): race=Asian's protected group
              THEN printf('the %s group of %s', attribute[strpos(attribute, '=') + 1:],
                          attribute[:strpos(attribute, '=') - 1])
         WHEN group_name IN ('protected', 'reference') THEN printf('the %s group of %s', group_name, attribute)
         ELSE replace(group_name, ',', ' & ') END;

CREATE OR REPLACE VIEW audit.findings AS
SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS VARCHAR) AS engine,
       CAST(NULL AS VARCHAR) AS attribute, CAST(NULL AS VARCHAR) AS group_name,
       CAST(NULL AS VARCHAR) AS finding, CAST(NULL AS BOOLEAN) AS headline,
       CAST(NULL AS BOOLEAN) AS flagged, CAST(NULL AS VARCHAR) AS measure,
       CAST(NULL AS DOUBLE) AS value, CAST(NULL AS DOUBLE) AS ci_low, CAST(NULL AS DOUBLE) AS ci_high,
       CAST(NULL AS DOUBLE) AS confidence, CAST(NULL AS DOUBLE) AS p_value,
       CAST(NULL AS BOOLEAN) AS significant, CAST(NULL AS BIGINT) AS individuals,
       CAST(NULL AS VARCHAR) AS cases_table, CAST(NULL AS VARCHAR) AS statement
WHERE false;
