"""Numbered schema migrations of the DuckDB store.

`schema_info(key='version')` holds the number of the last migration applied to a store (0, or no
`schema_info` table at all, for an empty file). A write open (store/db.py) applies every pending
migration in order, each in its own transaction together with its version bump, so a crash or a
failing migration leaves the store at the last migration that completed and the next open resumes
from there. A store whose version is higher than the newest migration here was written by a newer
gitlab_knowledge and is refused: this code cannot know what the newer one changed.

Migrations are history. A released migration never changes (stores exist that ran it); a change to
the schema is always a new migration with the next number. Each one spells out its own SQL rather
than borrowing names from the living code, so what it does stays what it did when it shipped.

Adding a column to a normalized table (issues, merge_requests, discussions, notes, ...):

1. A new migration here, e.g.

       @migration(3, "issue weight")
       def _issue_weight(con: duckdb.DuckDBPyConnection) -> None:
           con.execute("ALTER TABLE issues ADD COLUMN weight INTEGER")
           # Rebuild every project's normalized rows from the raw payloads on the next run, so
           # existing rows get the column too (not only the items GitLab changes from now on).
           con.execute("UPDATE layer_state SET watermark = 0 WHERE layer = 'normalized'")

2. The field in the row function of normalized/transform.py (`issue_row`: `"weight": p.get("weight")`).

Nothing else changes: the normalized layer inserts rows `BY NAME` through store/bulk.py, with an
Arrow schema read from the table itself, so a new column is written as soon as the row carries it
(and is NULL for rows that do not). bulk.py's per-process cache of those schemas is dropped
whenever a migration runs (store/db.py calls `bulk.forget_table_schemas`).
"""

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import duckdb

from gitlab_knowledge.errors import StoreError
from gitlab_knowledge.store.schema import BASELINE_DDL

MigrationFn = Callable[[duckdb.DuckDBPyConnection], None]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    apply: MigrationFn
    # Said (logged as a warning) when the migration upgrades a store that held data: what the
    # user must do for the upgrade to be complete, e.g. run a sync.
    notice: str | None = None


MIGRATIONS: list[Migration] = []


def migration(number: int, name: str, notice: str | None = None) -> Callable[[MigrationFn], MigrationFn]:
    """Register the decorated function as migration `number`; numbers must follow each other."""

    def register(fn: MigrationFn) -> MigrationFn:
        expected = MIGRATIONS[-1].number + 1 if MIGRATIONS else 1
        if number != expected:
            raise ValueError(f"migration {number} ({name}) registered where {expected} was expected")
        MIGRATIONS.append(Migration(number, name, fn, notice))
        return fn

    return register


def latest_version() -> int:
    """The version a store has once every migration known to this code has run."""
    return MIGRATIONS[-1].number if MIGRATIONS else 0


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """The store's version: 0 for a file no migration has touched."""
    # fetchall, not fetchone: a result left unfinished on the connection makes DuckDB refuse the
    # caller's next relation (`con.sql(...)`) with "connection has an unfinished result".
    rows = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = 'schema_info'").fetchall()
    if not rows or not rows[0][0]:
        return 0
    rows = con.execute("SELECT value FROM schema_info WHERE key = 'version'").fetchall()
    if not rows:
        return 0
    row = rows[0]
    try:
        return int(row[0])
    except ValueError:
        raise StoreError(f"the store's schema version is not a number ({row[0]!r}): not a gitlab_knowledge store?") from None


def refuse_newer(version: int) -> None:
    """A store from a newer gitlab_knowledge is not opened: we cannot know what it changed."""
    latest = latest_version()
    if version > latest:
        raise StoreError(f"the store was written by a newer gitlab_knowledge (schema {version} > {latest}): "
                         "upgrade gitlab_knowledge to use it")


def pending(version: int) -> list[Migration]:
    return [m for m in MIGRATIONS if m.number > version]


def migrate(con: duckdb.DuckDBPyConnection) -> list[int]:
    """Apply every pending migration in order; returns the numbers applied (none: already current).

    The caller holds a read-write connection and must be the only one migrating this store (DuckDB
    allows one writing process; store/db.py serializes the threads of this one).
    """
    version = current_version(con)
    refuse_newer(version)
    applied: list[int] = []
    for m in pending(version):
        con.execute("BEGIN TRANSACTION")
        try:
            m.apply(con)
            con.execute("INSERT OR REPLACE INTO schema_info VALUES ('version', ?)", [str(m.number)])
            con.execute("COMMIT")
        except Exception as exc:
            _rollback(con)
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreError(f"upgrading the store to schema {m.number} ({m.name}) failed, it stays at "
                             f"schema {applied[-1] if applied else version}: {detail}") from exc
        except BaseException:
            _rollback(con)
            raise
        applied.append(m.number)
        if m.notice and version > 0:
            log.warning("store upgraded to schema %d (%s): %s", m.number, m.name, m.notice)
    return applied


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    # The failure may have ended the transaction already; the original error is what matters.
    with contextlib.suppress(duckdb.Error):
        con.execute("ROLLBACK")


# -- the migrations ---------------------------------------------------------------------------


@migration(1, "baseline")
def _baseline(con: duckdb.DuckDBPyConnection) -> None:
    # Every store before numbered migrations was written by exactly this DDL and says version 1.
    con.execute(BASELINE_DDL)


@migration(2, "cursor kind names")
def _cursor_kind_names(con: duckdb.DuckDBPyConnection) -> None:
    # Cursors were keyed by GitLab's API path; every other table names the kind.
    con.execute("UPDATE sync_cursors SET resource_type = 'issue' WHERE resource_type = 'issues'")
    con.execute("UPDATE sync_cursors SET resource_type = 'merge_request' WHERE resource_type = 'merge_requests'")


@migration(3, "multi-line DiffNote ranges")
def _line_ranges(con: duckdb.DuckDBPyConnection) -> None:
    # A multi-line DiffNote's `position.line_range` (its first and last line) was dropped.
    for end in ("start", "end"):
        con.execute(f"ALTER TABLE note_positions ADD COLUMN line_range_{end}_line_code TEXT")
        con.execute(f"ALTER TABLE note_positions ADD COLUMN line_range_{end}_type TEXT")
        con.execute(f"ALTER TABLE note_positions ADD COLUMN line_range_{end}_old_line INTEGER")
        con.execute(f"ALTER TABLE note_positions ADD COLUMN line_range_{end}_new_line INTEGER")
    # Raw payloads are kept: the next run rebuilds every project's normalized rows from them, so
    # stored DiffNotes get their ranges, and rows the older transform mis-read (a singular
    # `assignee`) are read again.
    con.execute("UPDATE layer_state SET watermark = 0 WHERE layer = 'normalized'")


@migration(4, "document builder version")
def _document_builder_version(con: duckdb.DuckDBPyConnection) -> None:
    # Which builder (documents/build.py DOCUMENT_VERSION: builder.chunking) wrote each document;
    # a document of another version is rebuilt by the next run and reads as stale until then.
    # Every stored document was written by the builder that had no version yet: "1.1".
    con.execute("ALTER TABLE documents ADD COLUMN builder_version TEXT")
    con.execute("UPDATE documents SET builder_version = '1.1'")


@migration(5, "knowledge graph", notice=(
    "references are rebuilt from the stored descriptions and notes by the next run; MR file lists and "
    "system notes were never fetched before, so run a sync (`python -m gitlab_knowledge sync`) to fetch "
    "them (once, about one API call per merge request and per item with comments)"))
def _knowledge_graph(con: duckdb.DuckDBPyConnection) -> None:
    # System notes ("mentioned in merge request !847", "closed via merge request !119") hold most
    # of GitLab's own links between items. They get a table of their own, not a flag on `notes`:
    # everything built from `notes` (documents, note counts, the thread rules) stays about what
    # people wrote without each reader having to remember to leave them out.
    con.execute("""
        CREATE TABLE system_notes (
            id BIGINT PRIMARY KEY,
            discussion_id TEXT NOT NULL,
            project_id BIGINT NOT NULL,
            noteable_type TEXT NOT NULL,        -- Issue | MergeRequest
            noteable_id BIGINT NOT NULL,
            author_username TEXT,
            author_name TEXT,
            body TEXT,
            created_at TIMESTAMP,
            position INTEGER NOT NULL,          -- order within its thread, counting every note
            internal BOOLEAN,
            raw_payload_id BIGINT
        )
    """)
    # A link written in an item (its title, description, a note or a system note) to an issue or
    # MR. `references` is an SQL keyword, hence the name.
    con.execute("""
        CREATE TABLE item_references (
            project_id BIGINT NOT NULL,         -- the project the link was written in
            source_type TEXT NOT NULL,          -- issue | merge_request: the item it was written in
            source_id BIGINT NOT NULL,
            note_id BIGINT,                     -- the note holding it; NULL: the title or description
            found_in TEXT NOT NULL,             -- title | description | note | system_note
            kind TEXT NOT NULL,                 -- closes | closed_by | mentions | mentioned_in | related
            target_type TEXT NOT NULL,          -- issue | merge_request
            target_path TEXT NOT NULL,          -- the target project's path_with_namespace
            target_iid INTEGER NOT NULL,
            target_project_id BIGINT,           -- NULL: a project this store does not sync
            external BOOLEAN NOT NULL,
            text TEXT                           -- the words that made the link, e.g. "Closes #234"
        )
    """)
    # The files a merge request changed (GET .../merge_requests/:iid/diffs), paths only.
    con.execute("""
        CREATE TABLE mr_files (
            merge_request_id BIGINT NOT NULL,
            project_id BIGINT NOT NULL,
            position INTEGER NOT NULL,          -- order in GitLab's list
            old_path TEXT,
            new_path TEXT,
            new_file BOOLEAN,
            renamed_file BOOLEAN,
            deleted_file BOOLEAN,
            raw_payload_id BIGINT,
            PRIMARY KEY (merge_request_id, position)
        )
    """)
    # Who the token belongs to, per GitLab, as the last sync saw it (`me` without --user).
    con.execute("""
        CREATE TABLE gitlab_identity (
            gitlab_url TEXT PRIMARY KEY,
            user_id BIGINT,
            username TEXT NOT NULL,
            name TEXT,
            recorded_at TIMESTAMP NOT NULL
        )
    """)
    # The graph is rebuilt from the raw layer: the next run builds references from every stored
    # description and note. System notes and MR file lists were never fetched into older stores;
    # the next sync fetches them (threads of items with notes are refetched once, and every MR's
    # file list once), which costs one sync's worth of API calls.
    con.execute("UPDATE layer_state SET watermark = 0 WHERE layer = 'normalized'")
    # MR documents now name the issues they close. Rebuilding every document costs no embedding:
    # only a document whose text changed gets a new content hash (no builder version bump, which
    # would re-embed every document for the sake of the MRs that close something).
    con.execute("UPDATE layer_state SET watermark = 0 WHERE layer = 'documents'")
    con.execute("""
        UPDATE raw_payloads SET discussions_fetched_at = NULL
        WHERE resource_type IN ('issue', 'merge_request') AND deleted_at IS NULL
          AND COALESCE(TRY_CAST(json_extract(json, '$.user_notes_count') AS BIGINT), 0) > 0
    """)


@migration(6, "typed links and project aliases", notice=(
    "links are rebuilt with their types (duplicate_of, blocks, blocked_by, moved_to, ...) by the next run; "
    "the threads of items nobody commented on were never fetched, so run a sync "
    "(`python -m gitlab_knowledge sync`) to fetch them (once: one call per such item, two for one that has system notes)"))
def _typed_links(con: duckdb.DuckDBPyConnection) -> None:
    # A project path a link names that is not a synced project's path, as GitLab answered
    # `GET /projects/:path` for it once: the project its rename or transfer redirects to, or none.
    con.execute("""
        CREATE TABLE project_aliases (
            path TEXT PRIMARY KEY,              -- the path as links write it, lower case
            project_id BIGINT,                  -- the project GitLab answered with; NULL: 404
            path_with_namespace TEXT,           -- what GitLab called that project then
            looked_up_at TIMESTAMP NOT NULL
        )
    """)
    # The graph is rebuilt from the stored text: duplicate and blocking notes were folded into
    # `related`, "moved to" made no link.
    con.execute("UPDATE layer_state SET watermark = 0 WHERE layer = 'graph'")
    # Items without user notes had their threads skipped (their system notes are links): the next
    # sync rechecks them, which fetches their threads once.
    con.execute("""
        UPDATE raw_payloads SET discussions_fetched_at = NULL
        WHERE resource_type IN ('issue', 'merge_request') AND deleted_at IS NULL
          AND COALESCE(TRY_CAST(json_extract(json, '$.user_notes_count') AS BIGINT), 0) = 0
    """)


@migration(7, "mentions", notice=(
    "who is mentioned where is read from the stored titles, descriptions and notes by the next run "
    "(no GitLab call); until then `me` and `person` list no mentions"))
def _mentions(con: duckdb.DuckDBPyConnection) -> None:
    # Each @username written in an item's title, description or note (graph/mentions.py says
    # which words are one): `me` and `person` look a user's mentions up here rather than scan
    # every note body for `@username` on each call (~20 ms of 190 at 100K documents).
    con.execute("""
        CREATE TABLE mentions (
            project_id BIGINT NOT NULL,         -- the item's project
            item_type TEXT NOT NULL,            -- issue | merge_request: the item it was written in
            item_id BIGINT NOT NULL,
            note_id BIGINT,                     -- the note holding it; NULL: the title or description
            discussion_id TEXT,                 -- the note's thread
            found_in TEXT NOT NULL,             -- title | description | note
            username TEXT NOT NULL,             -- the name mentioned, lower case
            author_username TEXT,               -- who wrote it: the note's author, or the item's
            created_at TIMESTAMP,               -- when the note, or the item, was written
            resolvable BOOLEAN,                 -- the note's thread state, as the note says it
            resolved BOOLEAN
        )
    """)
    # The graph is rebuilt from the stored text (no GitLab call): every item's mentions are read.
    con.execute("UPDATE layer_state SET watermark = 0 WHERE layer = 'graph'")


@migration(8, "wiki pages")
def _wiki_pages(con: duckdb.DuckDBPyConnection) -> None:
    # A project's wiki pages (GET /projects/:id/wikis?with_content=1), keyed by the id of their raw
    # payload (raw_payloads.gitlab_key '<project id>:<slug>'): GitLab gives a page no id, and a
    # renamed page is a new slug, so a new row. Their documents use this id as parent_id (and 0 as
    # parent_iid), their links in item_references source_type 'wiki_page' and this id.
    con.execute("""
        CREATE TABLE wiki_pages (
            id BIGINT PRIMARY KEY,              -- the raw payload's id
            project_id BIGINT NOT NULL,
            slug TEXT NOT NULL,                 -- GitLab's key within the project, e.g. runbooks/deploy
            title TEXT,
            format TEXT,                        -- markdown | rdoc | asciidoc | org
            encoding TEXT,                      -- as GitLab says, e.g. UTF-8
            content TEXT,
            web_url TEXT,
            raw_payload_id BIGINT,
            change_seq BIGINT NOT NULL,
            UNIQUE (project_id, slug)
        )
    """)


@migration(9, "releases")
def _releases(con: duckdb.DuckDBPyConnection) -> None:
    # A project's releases (GET /projects/:id/releases), keyed by the id of their raw payload
    # (raw_payloads.gitlab_key '<project id>:<tag_name>'): GitLab gives a release no id, its tag is
    # its key within the project. Their documents use this id as parent_id (and 0 as parent_iid),
    # their links in item_references source_type 'release' and this id. `title` and `format` are
    # named as the wiki pages' are, so the keyed kinds' list/show/related read both alike. The
    # next sync fetches every project's releases (one call per 100), as for a new project.
    con.execute("""
        CREATE TABLE releases (
            id BIGINT PRIMARY KEY,              -- the raw payload's id
            project_id BIGINT NOT NULL,
            tag_name TEXT NOT NULL,             -- GitLab's key within the project, e.g. v2.4.0
            title TEXT,                         -- GitLab's `name` of the release (the tag when unnamed)
            format TEXT,                        -- of the notes: markdown (what GitLab renders them as)
            description TEXT,                   -- the release notes
            created_at TIMESTAMP,
            released_at TIMESTAMP,              -- when it shipped (or will: upcoming_release)
            upcoming_release BOOLEAN,
            author_username TEXT,
            author_name TEXT,
            commit_sha TEXT,
            milestones TEXT[],                  -- the milestones' titles
            web_url TEXT,
            raw_payload_id BIGINT,
            change_seq BIGINT NOT NULL,
            UNIQUE (project_id, tag_name)
        )
    """)


@migration(10, "people's items and the words around mentions")
def _people_items(con: duckdb.DuckDBPyConnection) -> None:
    # Each user's items with their roles, and their notes counted per item (graph/people_rows.py
    # keeps them as the graph layer runs): `me` and `person` read a user's rows here rather than
    # test every item's people lists and join every note on each call (~190 ms at 100K documents).
    # `internal` says whether a commenter row counts internal notes: a lens that hides internal
    # notes hides those rows, so what is counted is what its `notes` view shows.
    con.execute("""
        CREATE TABLE user_items (
            username TEXT NOT NULL,             -- lower case
            item_type TEXT NOT NULL,            -- issue | merge_request
            item_id BIGINT NOT NULL,
            project_id BIGINT NOT NULL,         -- the item's project
            role TEXT NOT NULL,                 -- author | assignee | reviewer | commenter
            internal BOOLEAN NOT NULL,          -- commenter: these notes are internal; false otherwise
            notes INTEGER,                      -- commenter: how many notes they wrote on the item
            last_note_at TIMESTAMP              -- commenter: the newest of them
        )
    """)
    # The notes others wrote on the items a user authored, is assigned to or reviews: `me`'s
    # "new notes on my items", read by username instead of joining every note to their items.
    con.execute("""
        CREATE TABLE user_item_notes (
            username TEXT NOT NULL,             -- lower case: the item's author, assignee or reviewer
            item_type TEXT NOT NULL,
            item_id BIGINT NOT NULL,
            project_id BIGINT NOT NULL,
            note_id BIGINT NOT NULL,
            author_username TEXT,               -- the note's author as stored (never the user)
            created_at TIMESTAMP,
            internal BOOLEAN NOT NULL
        )
    """)
    # The words around each mention (graph/mentions.py `around`), so `me` and `person` show its
    # excerpt without reading the note: the next graph run reads the stored texts again (no GitLab
    # call); until then they read the text, as before.
    con.execute("ALTER TABLE mentions ADD COLUMN excerpt TEXT")
    con.execute("UPDATE layer_state SET watermark = 0 WHERE layer = 'graph'")
    # Filled here from the normalized rows (no GitLab call, a second or two at 100K documents),
    # so `me` and `person` answer at once after the upgrade; the graph layer keeps them from now on.
    for kind, noteable, lists in (("issue", "Issue", (("assignee", "assignees"),)),
                                  ("merge_request", "MergeRequest", (("assignee", "assignees"), ("reviewer", "reviewers")))):
        table = f"{kind}s"
        listed = " UNION ".join(
            f"SELECT lower(name), '{kind}', id, project_id, '{role}', false, NULL, NULL "
            f"FROM (SELECT id, project_id, unnest({column}) AS name FROM {table}) WHERE name IS NOT NULL"
            for role, column in lists)
        con.execute(f"""
            INSERT INTO user_items
            SELECT lower(author_username), '{kind}', id, project_id, 'author', false, NULL, NULL FROM {table}
            WHERE author_username IS NOT NULL
            UNION {listed}
        """)
        con.execute(f"""
            INSERT INTO user_items
            SELECT lower(n.author_username), '{kind}', t.id, t.project_id, 'commenter', coalesce(n.internal, false),
                   count(*), max(n.created_at)
            FROM notes n JOIN {table} t ON n.noteable_type = '{noteable}' AND t.id = n.noteable_id
            WHERE n.author_username IS NOT NULL GROUP BY ALL
        """)
        con.execute(f"""
            INSERT INTO user_item_notes
            SELECT DISTINCT r.username, r.item_type, r.item_id, r.project_id, n.id, n.author_username, n.created_at,
                   coalesce(n.internal, false)
            FROM user_items r JOIN notes n ON n.noteable_type = '{noteable}' AND n.noteable_id = r.item_id
            WHERE r.item_type = '{kind}' AND r.role <> 'commenter'
              AND lower(coalesce(n.author_username, '')) <> r.username
        """)


# Later migrations live in modules of their own, named for what they add; loaded here, in order,
# so that importing this module registers every migration.
from gitlab_knowledge.store import migration_path_rows  # noqa: E402,F401
