-- The warehouse's fixed tables (DESIGN.md, "Warehouse contract"). Idempotent.
CREATE SCHEMA IF NOT EXISTS audit;
CREATE SCHEMA IF NOT EXISTS staging;

-- One row per staged dataset version: a validated, immutable copy of a source under a spec.
CREATE TABLE IF NOT EXISTS audit.datasets (
    dataset_version    VARCHAR PRIMARY KEY,  -- sha256(spec columns + source fingerprint), 16 hex
    spec_name          VARCHAR NOT NULL,
    source_kind        VARCHAR NOT NULL,
    source_fingerprint VARCHAR NOT NULL,     -- "<rows>:<order-independent content hash>"
    rows_read          BIGINT  NOT NULL,
    rows_staged        BIGINT  NOT NULL,
    rows_quarantined   BIGINT  NOT NULL,
    rows_out_of_scope  BIGINT  NOT NULL,     -- e.g. withdrawn applications (decision.out_of_scope)
    staged_table       VARCHAR NOT NULL,     -- staging.d_<dataset_version>
    lake_path          VARCHAR,              -- hive-partitioned Parquet copy
    categories         JSON,                 -- inferred category lists per categorical feature
    created_at         TIMESTAMP NOT NULL
);

-- What identifies a source without reading it (files: path, size, modification time; built-in
-- generators: name, rows, seed, code), and the hash of the record contract it was staged under.
ALTER TABLE audit.datasets ADD COLUMN IF NOT EXISTS source_stamp VARCHAR;
ALTER TABLE audit.datasets ADD COLUMN IF NOT EXISTS contract_hash VARCHAR;
-- What the lake copy's files were when it was staged (relative path, size, modification time of
-- each): a copy whose files changed since is staged again, not reused.
ALTER TABLE audit.datasets ADD COLUMN IF NOT EXISTS lake_stamp VARCHAR;
-- the files a dataset version was read from (JSON list of absolute paths): no command writes there
ALTER TABLE audit.datasets ADD COLUMN IF NOT EXISTS source_files VARCHAR;
-- per optional pricing field, the records kept whose value was not a number and is staged as
-- null (JSON object field -> count; the pricing engine reads null there, every other engine the record)
ALTER TABLE audit.datasets ADD COLUMN IF NOT EXISTS fields_nulled VARCHAR;
-- a hash of the bytes of the source's files when staged (flows.store.readers.content_digest): a
-- file source is reused only when its bytes still hash to it (unless --trust-mtime)
ALTER TABLE audit.datasets ADD COLUMN IF NOT EXISTS source_content VARCHAR;

-- Rows that failed validation, one per bad row, with the first failing field and why.
CREATE TABLE IF NOT EXISTS audit.quarantine (
    dataset_version VARCHAR NOT NULL,
    source_row      BIGINT,                  -- 0-based row number in the source
    record_id       VARCHAR,
    field           VARCHAR NOT NULL,
    value           VARCHAR,
    reason          VARCHAR NOT NULL
);

-- One row per audit run.
CREATE TABLE IF NOT EXISTS audit.runs (
    run_id             VARCHAR PRIMARY KEY,
    spec_name          VARCHAR NOT NULL,
    spec_hash          VARCHAR NOT NULL,
    dataset_version    VARCHAR,
    source_fingerprint VARCHAR,
    code_version       VARCHAR NOT NULL,
    model_fingerprint  VARCHAR,
    parameters         JSON NOT NULL,        -- the validated spec's engines section
    started_at         TIMESTAMP NOT NULL,   -- UTC (run_start.sql, run_finish.sql)
    finished_at        TIMESTAMP,
    status             VARCHAR NOT NULL,     -- running | succeeded | partial | failed | abandoned
    error              VARCHAR
);
-- The process running a run (a run whose process is gone is marked abandoned by the next writer).
ALTER TABLE audit.runs ADD COLUMN IF NOT EXISTS host VARCHAR;
ALTER TABLE audit.runs ADD COLUMN IF NOT EXISTS pid INTEGER;
ALTER TABLE audit.runs ADD COLUMN IF NOT EXISTS pid_started DOUBLE;

-- Status per engine per run.
CREATE TABLE IF NOT EXISTS audit.run_engines (
    run_id      VARCHAR NOT NULL,
    engine      VARCHAR NOT NULL,
    status      VARCHAR NOT NULL,            -- succeeded | failed
    seconds     DOUBLE,
    pieces      INTEGER,
    tables      JSON,                        -- {table name: rows written}
    error       VARCHAR,
    PRIMARY KEY (run_id, engine)
);
-- When the engine started (held its slot of the run's lock), Unix seconds: engines of a small
-- run overlap, two at a time.
ALTER TABLE audit.run_engines ADD COLUMN IF NOT EXISTS started DOUBLE;

-- Lenders' names by LEI (the HMDA panel's respondent names; `aequum panel`): a dimension the
-- per-lender findings and the report join, kept across runs.
CREATE TABLE IF NOT EXISTS audit.lender_panel (
    lei         VARCHAR PRIMARY KEY,
    name        VARCHAR NOT NULL,
    source      VARCHAR NOT NULL             -- the file it was read from
);

-- The tables aequum writes (a registry: a run's rows are removed only from these, never from a
-- table someone else keeps in the audit schema). The fixed tables of this file are registered
-- here; an engine's result table when Warehouse.ensure_result_table creates or extends it.
CREATE TABLE IF NOT EXISTS audit.aequum_tables (
    table_name VARCHAR PRIMARY KEY,
    kind       VARCHAR NOT NULL                -- fixed | result
);
INSERT OR IGNORE INTO audit.aequum_tables VALUES
    ('datasets', 'fixed'), ('quarantine', 'fixed'), ('runs', 'fixed'), ('run_engines', 'fixed'),
    ('aequum_tables', 'fixed'), ('lender_panel', 'fixed');
-- result tables written before the registry: those the engines recorded writing
INSERT OR IGNORE INTO audit.aequum_tables
SELECT DISTINCT name, 'result'
FROM (SELECT unnest(json_keys(tables)) AS name FROM audit.run_engines WHERE tables IS NOT NULL)
WHERE name IN (SELECT table_name FROM information_schema.tables WHERE table_schema = 'audit');

-- Every group a run's tables name, as the report names it (flows/store/group_labels.py writes a
-- run's rows with its results): join on (run_id, attribute, group_name).
CREATE TABLE IF NOT EXISTS audit.group_labels (
    run_id       VARCHAR NOT NULL,
    attribute    VARCHAR NOT NULL,           -- sex, race=Asian, race&sex
    group_name   VARCHAR,                    -- protected, reference, race=protected,sex=reference
    group_label  VARCHAR,                    -- Female, or minority race (pooled) & Female
    versus_label VARCHAR                     -- Female against Male
);
INSERT OR IGNORE INTO audit.aequum_tables VALUES ('group_labels', 'result');
