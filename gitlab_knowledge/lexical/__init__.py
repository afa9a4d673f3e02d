"""The lexical index: BM25 over title and body (English stemming) plus code identifiers (Tantivy)."""
