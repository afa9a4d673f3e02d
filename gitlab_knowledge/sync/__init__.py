"""Fetching GitLab into the raw layer: cursors, dependent discussions, reconciliation."""
