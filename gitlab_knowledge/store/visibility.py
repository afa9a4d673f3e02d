"""What an agent may see of the store, enforced under the queries rather than after them.

The graph tools and the items' links run the CLI's own functions (graph/queries.py), which read
every row. For the server they read through a lens (store/reader.py's Lens): views named like the
tables they shadow (`issues`, `notes`, `system_notes`, `discussions`, `item_references`), first
on the read's search path, so the same SQL reads only what the config lets agents see.
Confidential issues go with their threads, notes, system notes, the links written in them and the
links to them; internal notes go with their threads and the links written in them.

What is hidden is listed in small tables (the hidden issues; the hidden notes with their threads;
the hidden links), built once per version of the store rather than inside every query that scans
a view: deriving them costs ~10 ms at 100K documents, a hash lookup in them next to nothing.
"""

from gitlab_knowledge.store.reader import ALIAS, Lens

_STORE = f"{ALIAS}.main"


def hidden_lens(*, include_confidential: bool, include_internal: bool) -> Lens | None:
    """The lens that hides what the config leaves out (None: nothing is hidden)."""
    if include_confidential and include_internal:
        return None
    schema = f"gk_visible_{'c' if include_confidential else ''}{'i' if include_internal else ''}".rstrip("_")
    at = f"memory.{schema}"
    confidential = "false" if include_confidential else "coalesce(confidential, false)"
    hidden_note = " OR ".join(
        ([] if include_internal else ["coalesce(internal, false)"])
        + ([] if include_confidential else [f"(noteable_type = 'Issue' AND noteable_id IN (SELECT id FROM {at}.hidden_issues))"]))
    statements = (
        f"CREATE OR REPLACE TABLE {at}.hidden_issues AS "
        f"SELECT i.id, i.iid, i.project_id, lower(p.path_with_namespace) AS path FROM {_STORE}.issues i "
        f"JOIN {_STORE}.projects p ON p.id = i.project_id WHERE {confidential}",
        f"CREATE OR REPLACE TABLE {at}.hidden_notes AS "
        f"SELECT id, discussion_id FROM {_STORE}.notes WHERE {hidden_note} "
        f"UNION ALL SELECT id, discussion_id FROM {_STORE}.system_notes WHERE {hidden_note}",
        f"CREATE OR REPLACE VIEW {at}.issues AS SELECT * FROM {_STORE}.issues WHERE NOT {confidential}",
        f"CREATE OR REPLACE VIEW {at}.notes AS SELECT * FROM {_STORE}.notes "
        f"WHERE id NOT IN (SELECT id FROM {at}.hidden_notes)",
        f"CREATE OR REPLACE VIEW {at}.system_notes AS SELECT * FROM {_STORE}.system_notes "
        f"WHERE id NOT IN (SELECT id FROM {at}.hidden_notes)",
        # GitLab makes a whole thread internal (its replies are internal too): a thread holding an
        # internal note is an internal thread, as is every thread of a confidential issue.
        f"CREATE OR REPLACE VIEW {at}.discussions AS SELECT * FROM {_STORE}.discussions "
        f"WHERE id NOT IN (SELECT discussion_id FROM {at}.hidden_notes) "
        f"AND NOT (noteable_type = 'Issue' AND issue_id IN (SELECT id FROM {at}.hidden_issues))",
        # A link written in a hidden note or a confidential issue goes, and so does a link to a
        # confidential issue (rather than showing as an item not in the store). The hidden links
        # are listed by rowid, which holds until the store changes and the list is built again.
        f"CREATE OR REPLACE TABLE {at}.hidden_references AS SELECT r.rowid AS row FROM {_STORE}.item_references r "
        f"WHERE (r.note_id IS NOT NULL AND r.note_id IN (SELECT id FROM {at}.hidden_notes)) "
        f"OR (r.source_type = 'issue' AND r.source_id IN (SELECT id FROM {at}.hidden_issues)) "
        f"OR (r.target_type = 'issue' AND EXISTS (SELECT 1 FROM {at}.hidden_issues h WHERE h.iid = r.target_iid "
        "AND (h.project_id = r.target_project_id OR (r.target_project_id IS NULL AND h.path = lower(r.target_path)))))",
        f"CREATE OR REPLACE VIEW {at}.item_references AS SELECT * FROM {_STORE}.item_references "
        f"WHERE rowid NOT IN (SELECT row FROM {at}.hidden_references)",
    )
    return Lens(schema, statements)
