"""`explain REF`: the provenance chain of a document and whether it is fresh."""

import argparse
from datetime import datetime
from typing import Any

from rich.markup import escape

from gitlab_knowledge import kinds
from gitlab_knowledge.cli import console
from gitlab_knowledge.config import Config


def _short(value: Any) -> str:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, str) and len(value) == 64:
        return value[:12] + "…"
    return "-" if value is None else str(value)


def explain_cmd(args: argparse.Namespace, config: Config) -> int:
    from gitlab_knowledge.explain import explain
    from gitlab_knowledge.workspace import Workspace

    result = explain(Workspace(config), args.ref, args.project, live=args.live)
    if args.json:
        console.print_json(result.as_dict())
        return 0
    o = console.out
    chain = result.chain
    if "document" not in chain:  # a note only GitLab, or only the raw layer, has yet
        where = "not normalized yet" if "raw_payloads" in chain else "not in the store"
        o.print(f"[bold]{escape(result.document_id)}[/]  {where}\n\n[yellow]stale[/]:")
        for reason in result.reasons:
            o.print(f"  - {escape(reason)}")
        return 0
    doc = chain["document"]
    o.print(f"[bold]{escape(result.document_id)}[/]  {escape(doc['url'] or '')}")
    if "gitlab" in chain:
        g = chain["gitlab"]
        o.print("  GitLab now       " + (f"updated {_short(g['updated_at'])}, {g['user_notes_count']} user notes"
                                         if g["exists"] else "gone (404)"))
    for raw in chain["raw_payloads"]:
        deleted = f" [red]deleted {_short(raw['deleted_at'])}[/]" if raw["deleted_at"] else ""
        o.print(f"  raw payload      #{raw['id']} {raw['resource_type']} {escape(raw['gitlab_key'])}: GitLab updated "
                f"{_short(raw['updated_at'])}, fetched {_short(raw['fetched_at'])} by sync run {raw['sync_run_id']} "
                f"({raw['sync_mode']}, {raw['sync_status']}), Dagster run {_short(raw['dagster_run_id'])}, "
                f"seq {raw['change_seq']}{deleted}")
    norm = chain["normalized"]
    row = norm["row"]
    iid = f" (iid {row['iid']})" if row and row["iid"] is not None else ""  # a wiki page has none
    o.print(f"  normalized       {norm['table']} " + (f"{row['id']}{iid}, updated {_short(row['updated_at'])}, "
                                                      f"seq {row['change_seq']}" if row else "[red]missing[/]"))
    if norm.get("discussion"):
        d = norm["discussion"]
        o.print(f"                   discussion {escape(d['id'])}: {d['note_count']} note(s), "
                f"{_short(d['first_note_at'])} → {_short(d['last_note_at'])}")
    o.print(f"  document         hash {_short(doc['content_hash'])}, built {_short(doc['built_at'])} by Dagster run "
            f"{_short(doc['dagster_run_id'])}, ~{doc['token_count']} tokens"
            + (" [yellow](truncated)[/]" if doc["truncated"] else ""))
    v = chain["vector"]
    o.print(f"  vector           {escape(v['model'])}: " + (
        f"{v['chunks']} chunk(s), hash {_short(v['content_hash'])}, embedded {_short(v['embedded_at'])}"
        if v["present"] else "[red]missing[/]" + (f" (failed: {escape(v['failure']['error'])})" if v.get("failure") else "")))
    lex = chain["lexical"]
    o.print("  lexical index    " + (f"present, hash {_short(lex['content_hash'])}" if lex["present"] else "[red]missing[/]"))
    if result.verdict == "fresh":
        o.print("\n[green]fresh[/]: every layer holds the version GitLab gave the last sync"
                + ("" if args.live else " (add --live to compare with GitLab now)"))
    else:
        o.print("\n[yellow]stale[/]:")
        for reason in result.reasons:
            o.print(f"  - {escape(reason)}")
    if result.related:
        keyed = kinds.keyed(doc["source_type"])
        parent = keyed.mid_sentence if keyed else kinds.kind(doc["source_type"]).mid_sentence \
            if doc["source_type"] != kinds.DISCUSSION else "parent"
        o.print(f"\n{len(result.related)} other document(s) of the same {parent}: "
                + ", ".join(result.related[:5]) + (" …" if len(result.related) > 5 else ""))
    return 0
