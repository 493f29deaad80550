"""The store's schema: numbered migrations, applied in order, each once (`schema_migrations`)."""

from __future__ import annotations

from agentmemrec.indexing.errors import StoreError

# Migration 1's units table, the first migration of both backends (pg_migrations). History: a
# change is a new migration in each, never an edit here.
UNITS = """
    CREATE SEQUENCE unit_ids START 1;
    CREATE SEQUENCE unit_seq START 1;
    CREATE TABLE units (
        id BIGINT PRIMARY KEY DEFAULT nextval('unit_ids'),
        project VARCHAR NOT NULL,
        key VARCHAR NOT NULL,
        kind VARCHAR NOT NULL,
        ref VARCHAR,
        chunk INTEGER NOT NULL,
        content_hash VARCHAR NOT NULL,
        text VARCHAR NOT NULL,
        tokens INTEGER NOT NULL,
        session VARCHAR, role VARCHAR, speaker VARCHAR, title VARCHAR, status VARCHAR,
        supersedes BIGINT, superseded_by BIGINT, path VARCHAR, heading VARCHAR,
        recorded_at TIMESTAMP NOT NULL,
        seq BIGINT NOT NULL,
        written_at TIMESTAMP NOT NULL,
        UNIQUE (project, key)
    );
"""

REVOKED = """
    CREATE TABLE revoked_tokens (secret_sha256 VARCHAR PRIMARY KEY, name VARCHAR NOT NULL,
                                 revoked_at TIMESTAMP NOT NULL);
"""

# Keys of forgotten units (`ref:<ref>#<chunk>`, or `hash:<SHA-256 of the content>#<chunk>` for an
# item without a ref; never their text), so no copy of a store (migrate) brings a forgotten unit back
FORGOTTEN = """
    CREATE TABLE forgotten_keys (project VARCHAR NOT NULL, key VARCHAR NOT NULL,
                                 forgotten_at TIMESTAMP NOT NULL, PRIMARY KEY (project, key));
"""

ORPHANS = """
    DELETE FROM vectors WHERE NOT EXISTS (SELECT 1 FROM units WHERE units.id = vectors.unit_id);
"""

MIGRATIONS: list[str] = [
    # 1: units, per-project generations, saved slate explanations
    UNITS + """
    CREATE TABLE projects (project VARCHAR PRIMARY KEY, generation BIGINT NOT NULL,
                           units BIGINT NOT NULL DEFAULT 0);
    CREATE TABLE slates (slate_id VARCHAR PRIMARY KEY, project VARCHAR NOT NULL,
                         created_at TIMESTAMP NOT NULL, payload VARCHAR NOT NULL);
    """,
    # 2: dense vectors, keyed by unit, model identity and the content they were computed from
    """
    CREATE TABLE vectors (unit_id BIGINT NOT NULL, model VARCHAR NOT NULL,
                          content_hash VARCHAR NOT NULL, vec BLOB NOT NULL,
                          PRIMARY KEY (unit_id, model));
    CREATE TABLE vector_state (project VARCHAR NOT NULL, model VARCHAR NOT NULL,
                               generation BIGINT NOT NULL, PRIMARY KEY (project, model));
    """,
    # 3: bearer tokens for the HTTP transport: only a hash of each secret is kept
    """
    CREATE TABLE tokens (name VARCHAR PRIMARY KEY, secret_sha256 VARCHAR NOT NULL UNIQUE,
                         projects VARCHAR[] NOT NULL, created_at TIMESTAMP NOT NULL);
    """,
    # 4: change logs, so derived indexes catch up with a write instead of rebuilding; a log
    # reaches back to `logged_from` (the generation at which this migration ran)
    """
    CREATE TABLE unit_changes (project VARCHAR NOT NULL, generation BIGINT NOT NULL,
                               unit_id BIGINT NOT NULL);
    CREATE TABLE vector_changes (project VARCHAR NOT NULL, model VARCHAR NOT NULL,
                                 generation BIGINT NOT NULL, unit_id BIGINT NOT NULL);
    ALTER TABLE projects ADD COLUMN logged_from BIGINT DEFAULT 0;
    UPDATE projects SET logged_from = generation;
    ALTER TABLE vector_state ADD COLUMN logged_from BIGINT DEFAULT 0;
    UPDATE vector_state SET logged_from = generation;
    """,
    # 5: revoked tokens' hashes, so no copy of a store (migrate) brings a revoked secret back
    REVOKED,
    # 6: forgotten units' keys, so no copy of a store (migrate) brings a forgotten unit back
    FORGOTTEN,
    # 7: the vectors (and text hashes) of units forgotten before forget removed them too
    ORPHANS,
]


def check_known(done: set[int], known: int, where: str) -> None:
    """Refuse a store that a newer version migrated past the `known` migrations this code has:
    its writes would fail on columns this code does not fill, or worse, succeed half-right."""
    newer = sorted(v for v in done if v > known)
    if newer:
        raise StoreError(f"the memory store {where} was migrated by a newer AgentMemRec (schema version "
                         f"{newer[-1]}; this one knows up to {known}): upgrade this AgentMemRec "
                         "(pip install -U agentmemrec) before using that store")
