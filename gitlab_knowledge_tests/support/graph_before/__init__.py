"""The graph's read functions as they were before issue 26's third round (commit 651bf7c), kept
verbatim as the oracle of test_graph_before_and_after: the rewritten queries (links in three
queries, mentions picked in Python, `me`'s and `person`'s items read once, history's rows in
one query per path) must answer exactly what these did."""
