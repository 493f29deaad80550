"""Stage 1 (write-time units) and what stage 2 reads: the vocabulary (`units`, `errors`,
`tokens`, `redact`), the store (`store/`), the two channels' derived indexes (`lexical/`,
`dense/`, both made of the immutable parts in `segments`) and the sources that write on their
own (`sources/`)."""
