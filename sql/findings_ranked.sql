-- audit.findings: the union of the engines' parts (audit.all_findings) with one meaning of
-- flagged and evidence across engines, what kind of claim each finding is, and its rank in its
-- run (1 first), for BI tools and the report. Warehouse.create_views writes the union to
-- audit.all_findings and then runs this file.
--
-- claim: what the finding is about.
--   about the lender  a tested difference in how the lender treated applicants (adjusted and
--                     direct-effect disparities, pricing, per-lender disparities against the
--                     market, stated reasons, the redlining screen; raw disparities when the
--                     audit asks about disparate impact; the individual
--                     methods on records that hold every input of the decisions)
--   about the model   a property of the model examined (PBA's verified bounds, CEC's
--                     explanations, FGCE's and RAGUEL's recourse), the lender's model or a
--                     surrogate fitted to the decisions: never a claim about the decisions made
--   descriptive       figures that describe without testing the audit's question: raw
--                     disparities of a disparate-treatment audit (crude per-lender denial odds
--                     against volume peers among them), and the individual methods'
--                     shares on records that lack inputs of the decisions (their neighbours
--                     differ in what the records cannot see)
--   audit quality     how well the audit's findings find the harmed (a generated ground truth)
-- groups_inferred: the finding's attribute (or a part of its intersection) was inferred by a proxy
-- (protected[].proxy, runs.parameters $.audit.proxied), not recorded; its statement says so.
-- flagged: the part's flag on a claim about the lender (a tested, adjusted difference in the
-- applicants' disfavour that a user should review); false for every other claim.
-- evidence: the part's evidence on a claim about the lender; false for every other claim.
-- group_label: the group against its reference as the report names it ("Female against Male";
-- audit.group_labels.versus_label, written with the run), the code where a run has none.
-- rank: evidence first, then claims about the lender, flagged before not, a pooled group (race
-- with its values compared one by one) after its named groups when one of them is flagged (the
-- named group carries the effect), headline rows first; within each, the more certain (smaller
-- p-value) and the more individuals first.
CREATE OR REPLACE VIEW audit.findings AS
WITH c AS (
    SELECT f.*,
           CASE WHEN f.estimand = 'detection quality' THEN 'audit quality'
                WHEN f.estimand IN ('model property', 'recourse') OR starts_with(f.estimand, 'procedural (model')
                     THEN 'about the model'
                WHEN f.estimand = 'raw disparity' AND NOT (f.engine = 'geography' AND starts_with(f.finding, 'redlining'))
                     AND coalesce(x.question, 'disparate_treatment') <> 'disparate_impact' THEN 'descriptive'
                WHEN f.engine = 'cst' AND coalesce(x.inputs, 'partial') <> 'complete' THEN 'descriptive'
                ELSE 'about the lender' END AS claim,
           coalesce(audit.compared_attribute(f.attribute), f.attribute) AS parent,
           audit.compared_attribute(f.attribute) IS NOT NULL AS named,
           coalesce(len(list_intersect(string_split(f.attribute, '&'), px.names)) > 0, false) AS groups_inferred,
           px.threshold
    FROM audit.all_findings f
    LEFT JOIN audit.run_context x USING (run_id)
    LEFT JOIN (SELECT run_id, list_transform(p, lambda e: e.attribute) AS names,
                      list_max(list_transform(p, lambda e: e.threshold)) AS threshold
               FROM (SELECT run_id, from_json(json_extract(parameters, '$.audit.proxied'),
                                              '[{"attribute": "VARCHAR", "threshold": "DOUBLE"}]') AS p
                     FROM audit.runs)) px USING (run_id)
), i AS (
    -- a finding on groups the proxy inferred says so (the proxy engine's own statements do)
    SELECT c.* EXCLUDE (threshold) REPLACE (CASE WHEN c.groups_inferred AND c.engine <> 'proxy' THEN c.statement || printf(
             ' The groups were inferred by BISG from surname and geography, not recorded: a record counts in a '
             'group when its most probable race has probability %.2f or more; misassigned records pull a difference '
             'toward zero and the records left out may differ from those kept (the proxy engine''s corrected '
             'gaps hold the proxy''s error).', c.threshold) ELSE c.statement END AS statement)
    FROM c
), k AS (
    SELECT c.* REPLACE (coalesce(c.flagged, false) AND c.claim = 'about the lender' AS flagged,
                        coalesce(c.evidence, false) AND c.claim = 'about the lender' AS evidence)
    FROM i AS c
), d AS (
    SELECT k.*,
           NOT k.named AND coalesce(bool_or(k.named AND k.flagged) OVER (PARTITION BY k.run_id, k.engine, k.parent),
                                    false) AS demoted
    FROM k
)
SELECT d.run_id, d.engine, d.attribute, d.group_name,
       coalesce(l.versus_label, d.group_name) AS group_label,
       d.* EXCLUDE (run_id, engine, attribute, group_name, parent, named, demoted),
       row_number() OVER (
         PARTITION BY d.run_id
         ORDER BY d.evidence DESC NULLS LAST,
                  CASE d.claim WHEN 'about the lender' THEN 0 WHEN 'about the model' THEN 1
                               WHEN 'descriptive' THEN 2 ELSE 3 END,
                  d.flagged DESC NULLS LAST, d.demoted, d.headline DESC NULLS LAST,
                  d.p_value ASC NULLS LAST, d.individuals DESC NULLS LAST,
                  d.engine, d.attribute, d.group_name, d.finding
       ) AS rank
FROM d
LEFT JOIN audit.group_labels l
       ON l.run_id = d.run_id AND l.attribute = d.attribute AND l.group_name = d.group_name;
