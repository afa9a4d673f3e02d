"""The normalized layer: raw payloads turned into projects, issues, MRs, labels, discussions, notes."""
