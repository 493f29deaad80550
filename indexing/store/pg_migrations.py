"""The PostgreSQL store's schema: numbered migrations, applied in order, each once.

The same tables as the DuckDB store (`migrations`), numbered on their own: vectors are pgvector
`halfvec` (float16, as DuckDB's BLOBs hold), and the indexes are the ones a row store needs for
the shared SQL's lookups by project and ref, session, time and id window.
"""

from __future__ import annotations

from agentmemrec.indexing.store.migrations import FORGOTTEN, ORPHANS, REVOKED, UNITS

MIGRATIONS: list[str] = [
    # 1: units, projects and their change log, vectors and theirs, saved explanations, tokens
    """
    CREATE EXTENSION IF NOT EXISTS vector;
    """ + UNITS + """
    CREATE INDEX units_by_project_id ON units (project, id);
    CREATE INDEX units_by_ref ON units (project, ref) WHERE ref IS NOT NULL;
    CREATE INDEX units_by_session ON units (project, session) WHERE session IS NOT NULL;
    CREATE INDEX units_by_time ON units (project, recorded_at);
    CREATE TABLE projects (project VARCHAR PRIMARY KEY, generation BIGINT NOT NULL,
                           units BIGINT NOT NULL DEFAULT 0, logged_from BIGINT DEFAULT 0);
    CREATE TABLE unit_changes (project VARCHAR NOT NULL, generation BIGINT NOT NULL,
                               unit_id BIGINT NOT NULL);
    CREATE INDEX unit_changes_by_generation ON unit_changes (project, generation);
    CREATE TABLE vectors (unit_id BIGINT NOT NULL, model VARCHAR NOT NULL,
                          content_hash VARCHAR NOT NULL, vec halfvec NOT NULL,
                          PRIMARY KEY (unit_id, model));
    CREATE TABLE vector_state (project VARCHAR NOT NULL, model VARCHAR NOT NULL,
                               generation BIGINT NOT NULL, logged_from BIGINT DEFAULT 0,
                               PRIMARY KEY (project, model));
    CREATE TABLE vector_changes (project VARCHAR NOT NULL, model VARCHAR NOT NULL,
                                 generation BIGINT NOT NULL, unit_id BIGINT NOT NULL);
    CREATE INDEX vector_changes_by_generation ON vector_changes (project, model, generation);
    CREATE TABLE slates (slate_id VARCHAR PRIMARY KEY, project VARCHAR NOT NULL,
                         created_at TIMESTAMP NOT NULL, payload VARCHAR NOT NULL);
    CREATE INDEX slates_by_time ON slates (project, created_at);
    CREATE TABLE tokens (name VARCHAR PRIMARY KEY, secret_sha256 VARCHAR NOT NULL UNIQUE,
                         projects VARCHAR[] NOT NULL, created_at TIMESTAMP NOT NULL);
    """,
    # 2: revoked tokens' hashes, so no copy of a store (migrate) brings a revoked secret back
    REVOKED,
    # 3: forgotten units' keys, so no copy of a store (migrate) brings a forgotten unit back
    FORGOTTEN,
    # 4: the vectors (and text hashes) of units forgotten before forget removed them too
    ORPHANS,
]
