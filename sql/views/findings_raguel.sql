-- RAGUEL findings (Haldar et al.): per run x protected attribute x algorithm (main
-- configuration), whether the ranking by recourse cost represents the groups fairly (Def. 3.2
-- per prefix / per block), the recourse fairness ratio r (Eq. 4) and what re-ranking takes.
-- Flagged when the ranking misrepresents the groups before re-ranking (block: an unfair block;
-- prefix: a prefix that needs actions); whether the re-ranking repaired it is the statement's,
-- not the flag's.
CREATE OR REPLACE VIEW audit.findings_raguel AS
SELECT run_id, 'raguel' AS engine, attribute, 'protected' AS group_name,
       printf('ranked recourse representation (%s)', algorithm) AS finding, true AS headline,
       coalesce(CASE WHEN algorithm = 'block' THEN unfair_blocks_before > 0 ELSE points_changed > 0 END,
                false) AS flagged,
       'r_before' AS measure, r_before AS value, NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high,
       NULL::DOUBLE AS confidence, NULL::DOUBLE AS p_value, NULL::BOOLEAN AS significant,
       points_changed AS individuals, 'raguel_actions' AS cases_table,
       CASE WHEN algorithm = 'block' THEN printf(
              'Ranked by the cost of recourse, %s of %s blocks of %d misrepresent the groups of %s '
              '(tolerance %.2f); the recourse fairness ratio is %.2f; the suggested actions move %s '
              'applicants (total cost %s) and leave %s unfair block(s).',
              audit.num(unfair_blocks_before), audit.num(blocks), block_size, attribute, tolerance,
              r_before, audit.num(points_changed), audit.num(total_modification_cost),
              audit.num(unfair_blocks_after))
            ELSE printf(
              'Ranked by the cost of recourse, %s applicants (%s of them %s) are %s; the '
              'recourse fairness ratio (lowest over highest group mean cost) is %.2f, %.2f at worst '
              'over the prefixes; making every prefix fair takes actions by %s applicants (total cost %s)%s.',
              audit.num(n), audit.pct(protected_share), audit.applicants(run_id, attribute, 'protected'),
              CASE WHEN points_changed > 0 THEN 'not fairly represented in every prefix'
                   ELSE 'fairly represented in every prefix' END,
              r_before, min_prefix_r_before, audit.num(points_changed), audit.num(total_modification_cost),
              CASE WHEN success THEN '' ELSE '; the repair did not succeed' END)
       END AS statement,
       'recourse' AS estimand, 'the cost of recourse under the audited model' AS basis,
       false AS evidence, NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM audit.raguel_summary
WHERE configuration = 'main';
