"""The store: the rows every index is derived from, and the only code that speaks SQL.

`protocol` is what the rest of the code calls (`Store`, `VectorRows`) and the values they hand
back; `backends.open_store` picks the backend. `sql_store` is the SQL both backends share, with
`writes` (the batch write path) and `changes` (what derived indexes follow) beside it;
`duckdb_store` is the embedded DuckDB store (one file per home, `migrations` its numbered
schema). `vectors`, `slates`, `principals` and `sessions` keep the stored vectors, the saved
slate explanations, the bearer tokens and session order; `generations` caches generation numbers
in the process. `embedding_cache` is evaluation's cache, a file of its own."""
