"""The store: the rows every index is derived from, and the only code that speaks SQL.

`duckdb_store` is the embedded DuckDB store (one file per home); `writes` and `migrations` are
its batch write path and numbered schema; `changes` reads its change log for the indexes that
follow it; `vectors`, `slates`, `principals` and `sessions` keep the stored vectors, the saved
slate explanations, the bearer tokens and session order in the same file; `generations` caches
generation numbers in the process. `embedding_cache` is evaluation's cache, a file of its own."""
