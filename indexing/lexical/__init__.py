"""The BM25 channel: postings built with bm25s's tokenizer and scored with Lucene's BM25
(`postings`), one index per project that follows every write and is saved to disk (`index`)."""
