"""The knowledge graph: links between issues, MRs, files and people."""
