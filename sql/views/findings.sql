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
--   estimand     what the figure estimates: raw disparity, adjusted disparity (given named
--                controls), direct effect (given the recorded inputs), total effect or
--                path-specific effect (through the SCM), procedural (reasons, explanations),
--                model property (of the lender's model or of a surrogate fitted to the
--                decisions), recourse, detection quality (of the audit itself)
--   basis        what it is conditional on: the controls, the inputs compared, the model
--   evidence     true when the finding is evidence on the audit's question (runs.parameters
--                $.audit.question): for disparate treatment, a significant direct-effect or
--                adjusted finding that survives the sensitivity analysis (robust) or rests on
--                every input of the decisions (decision.inputs: complete), or a proven property
--                of the lender's own model; for disparate impact, a significant adverse
--                disparity; for counterfactual fairness, a total-effect finding
--   robust       whether an unobserved confounder as strong as the strongest observed control
--                would leave it standing (Cinelli & Hazlett 2020; audit.regression_estimates);
--                null where not assessed
--   robustness_value  RV_{1,alpha}: the partial R-squared an unobserved confounder needs with
--                both group and decision to make it insignificant (Cinelli & Hazlett 2020)
--   e_value      for ratio findings, the E-value of the ratio (VanderWeele & Ding 2017)
--   claim        what the finding is about: about the lender, about the model, descriptive,
--                audit quality (sql/findings_ranked.sql derives it; flagged and evidence are
--                only ever true on claims about the lender)
--   groups_inferred  the attribute's groups were inferred by a proxy (BISG), not recorded; the
--                statement says what that does to the estimate (sql/findings_ranked.sql)
--   rank         the finding's place in its run by severity x confidence, 1 first
--                (sql/findings_ranked.sql ranks the union; the parts do not have it)

CREATE OR REPLACE MACRO audit.pct(x) AS
    CASE WHEN x IS NULL THEN 'n/a' ELSE printf('%.1f%%', 100 * x) END;

CREATE OR REPLACE MACRO audit.num(x) AS
    CASE WHEN x IS NULL THEN 'n/a' ELSE printf('%,d', CAST(x AS BIGINT)) END;

CREATE OR REPLACE MACRO audit.pval(p) AS
    CASE WHEN p IS NULL THEN 'not tested' WHEN p < 0.001 THEN 'p < 0.001' ELSE printf('p = %.3f', p) END;

-- what a row's interval and p rest on (engines.regression.wild: the inference column), in words:
-- clustered errors only where there are clusters to be robust to, the wild bootstrap's p with few
-- clusters, HC1 (and no cluster-robust claim) with one
CREATE OR REPLACE MACRO audit.inference_text(inference_, cluster_, clusters_, draws_) AS
    CASE inference_
      WHEN 'CR1' THEN printf('intervals robust to clustering by %s, %s clusters', cluster_, audit.num(clusters_))
      WHEN 'WCR-bootstrap' THEN printf('p from a wild cluster bootstrap over %s clusters of %s (%s draws), '
                                       'interval robust to clustering with t(%s)', audit.num(clusters_), cluster_,
                                       audit.num(draws_), audit.num(clusters_ - 1))
      WHEN 'score-bootstrap' THEN printf('p from a wild score bootstrap over %s clusters of %s (%s draws)',
                                         audit.num(clusters_), cluster_, audit.num(draws_))
      WHEN 'HC1' THEN CASE WHEN cluster_ IS NOT NULL
                           THEN printf('one %s only: heteroskedasticity-robust (HC1) errors, no cluster-robust claim', cluster_)
                           ELSE 'heteroskedasticity-robust (HC1) errors' END
      ELSE 'classical errors' END;

-- The per-value comparisons (protected[].compare: each) of every run, as the audit tables name
-- them (race=Asian) with the attribute and value the name is made of (runs.parameters
-- $.audit.comparisons): a label is never split on '=', which a name or a value may hold.
CREATE OR REPLACE VIEW audit.comparisons AS
SELECT DISTINCT c.label, c.attribute, c.value
FROM (SELECT unnest(from_json(json_extract(parameters, '$.audit.comparisons'),
                              '[{"label": "VARCHAR", "attribute": "VARCHAR", "value": "VARCHAR"}]')) AS c
      FROM audit.runs) AS r;

-- the attribute of a per-value comparison's label (null for any other label)
CREATE OR REPLACE MACRO audit.compared_attribute(label_) AS
    (SELECT min(c.attribute) FROM audit.comparisons c WHERE c.label = label_);

-- A run's group as the report and its tables name it (audit.group_labels.group_label, written
-- with the run, and for a run written before that table when the warehouse is next opened for
-- writing: flows/store/group_labels.py): "Female", "minority race (pooled)", "Asian",
-- "majority-minority tract (> 50 %)", "minority race (pooled) & Female"; a group the run's
-- labels do not hold, by its code ("protected group of race"). One lookup: the findings' views
-- call it a hundred times, and each call is planned where it is written.
CREATE OR REPLACE MACRO audit.group_label(run_id_, attribute_, group_name_) AS
    coalesce((SELECT min(gl_.group_label) FROM audit.group_labels gl_
              WHERE gl_.run_id = run_id_ AND gl_.attribute = attribute_ AND gl_.group_name = group_name_),
             CASE WHEN group_name_ IN ('protected', 'reference') THEN group_name_ || ' group of ' || attribute_
                  ELSE group_name_ END);

-- The group's applicants, the subject of the findings' sentences: "Female applicants", "minority
-- race (pooled) & Female applicants"; a group whose values were not recorded (its label is its
-- code): "applicants in the protected group of race"; a group named by a number (a per-value
-- comparison of a coded column, gender=1): "applicants with gender 1".
CREATE OR REPLACE MACRO audit.applicants(run_id_, attribute_, group_name_) AS
    (SELECT CASE WHEN contains(w_.label, '=') OR w_.label IN (group_name_ || ' group of ' || attribute_,
                                                             'reference group of ' || w_.parent)
                 THEN 'applicants in the ' || w_.label
                 WHEN regexp_full_match(w_.label, '[-+]?[0-9][0-9.]*') THEN printf('applicants with %s %s', w_.parent, w_.label)
                 ELSE w_.label || ' applicants' END
     FROM (SELECT audit.group_label(run_id_, attribute_, group_name_) AS label,
                  coalesce(audit.compared_attribute(attribute_), attribute_) AS parent) w_);

-- E-value of a risk ratio (VanderWeele & Ding 2017): RR + sqrt(RR (RR - 1)), with 1/RR below 1
CREATE OR REPLACE MACRO audit.e_value(rr) AS
    CASE WHEN rr IS NULL OR rr <= 0 THEN NULL
         WHEN rr >= 1 THEN rr + sqrt(rr * (rr - 1))
         ELSE 1 / rr + sqrt((1 / rr) * (1 / rr - 1)) END;

-- the E-value of the interval's limit nearer 1 (1 when the interval holds 1)
CREATE OR REPLACE MACRO audit.e_value_ci(lo, hi) AS
    CASE WHEN lo IS NULL OR hi IS NULL THEN NULL
         WHEN lo > 1 THEN audit.e_value(lo)
         WHEN hi < 1 THEN audit.e_value(hi)
         ELSE 1.0 END;

-- a list in words: "a", "a and b", "a, b and c" (null when empty)
CREATE OR REPLACE MACRO audit.and_list(l) AS
    CASE WHEN l IS NULL OR len(l) = 0 THEN NULL
         WHEN len(l) = 1 THEN l[1]
         ELSE array_to_string(list_slice(l, 1, len(l) - 1), ', ') || ' and ' || l[len(l)] END;

-- What each run asked (spec.run_parameters: the question, whether the records hold every
-- input of the decisions, whose model the model engines examine); runs written before these
-- were recorded read as the defaults.
CREATE OR REPLACE VIEW audit.run_context AS
SELECT run_id,
       coalesce(json_extract_string(parameters, '$.audit.question'), 'disparate_treatment') AS question,
       coalesce(json_extract_string(parameters, '$.audit.inputs'), 'partial') AS inputs,
       -- the inputs the records lack, in words (decision.missing_inputs), for the statements
       coalesce(audit.and_list(from_json(json_extract(parameters, '$.audit.missing_inputs'), '["VARCHAR"]')),
                'inputs of the decisions the records lack (such as the credit history and score)') AS missing,
       json_extract_string(parameters, '$.audit.model') AS model,
       CASE json_extract_string(parameters, '$.audit.model')
            WHEN 'lender' THEN 'the lender''s model supplied with the spec'
            WHEN 'surrogate' THEN 'a surrogate model fitted to the recorded decisions, not the lender''s model'
            ELSE 'the audited model' END AS model_basis
FROM audit.runs;

-- The group-level test and sensitivity analysis of each run x attribute
-- (audit.regression_estimates: whether the controlled disparity is significant, and how strong
-- an unobserved confounder must be to explain it away);
-- sql/views/robustness.sql replaces this empty view once the regression engine has run.
CREATE OR REPLACE VIEW audit.robustness AS
SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS VARCHAR) AS attribute,
       CAST(NULL AS BOOLEAN) AS robust, CAST(NULL AS DOUBLE) AS robustness_value,
       CAST(NULL AS VARCHAR) AS strongest_control, CAST(NULL AS DOUBLE) AS group_p_value,
       CAST(NULL AS BOOLEAN) AS group_tested, CAST(NULL AS BOOLEAN) AS group_significant
WHERE false;

CREATE OR REPLACE VIEW audit.findings AS
SELECT CAST(NULL AS VARCHAR) AS run_id, CAST(NULL AS VARCHAR) AS engine,
       CAST(NULL AS VARCHAR) AS attribute, CAST(NULL AS VARCHAR) AS group_name,
       CAST(NULL AS VARCHAR) AS finding, CAST(NULL AS BOOLEAN) AS headline,
       CAST(NULL AS BOOLEAN) AS flagged, CAST(NULL AS VARCHAR) AS measure,
       CAST(NULL AS DOUBLE) AS value, CAST(NULL AS DOUBLE) AS ci_low, CAST(NULL AS DOUBLE) AS ci_high,
       CAST(NULL AS DOUBLE) AS confidence, CAST(NULL AS DOUBLE) AS p_value,
       CAST(NULL AS BOOLEAN) AS significant, CAST(NULL AS BIGINT) AS individuals,
       CAST(NULL AS VARCHAR) AS cases_table, CAST(NULL AS VARCHAR) AS statement,
       CAST(NULL AS VARCHAR) AS estimand, CAST(NULL AS VARCHAR) AS basis,
       CAST(NULL AS BOOLEAN) AS evidence, CAST(NULL AS BOOLEAN) AS robust,
       CAST(NULL AS DOUBLE) AS robustness_value, CAST(NULL AS DOUBLE) AS e_value,
       CAST(NULL AS VARCHAR) AS claim, CAST(NULL AS BOOLEAN) AS groups_inferred, CAST(NULL AS BIGINT) AS rank
WHERE false;
