"""Search documents: one per issue, MR and discussion thread, with parent context."""
