"""lancedb is imported without eagerly loading its REST-namespace API classes, and they still
load on demand (search's one-shot start-up depends on the first; nothing may break from it)."""

import subprocess
import sys


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_namespace_api_classes_are_not_imported_with_lancedb_but_load_on_first_use():
    out = _run(
        "import sys\n"
        "from gitlab_knowledge.embeddings import vectors\n"
        "eager = sorted(n for n in sys.modules if n.startswith('lance_namespace_urllib3_client.api'))\n"
        "print(len(eager))\n"
        "from lance_namespace_urllib3_client import ApiClient, TableApi\n"
        "import lance_namespace_urllib3_client as c\n"
        "print(ApiClient.__name__, TableApi.__name__, bool(c.__version__))\n"
        "try:\n"
        "    c.no_such_name\n"
        "except AttributeError:\n"
        "    print('missing names still fail')\n"
    )
    assert out.splitlines() == ["0", "ApiClient TableApi True", "missing names still fail"]


def test_a_local_table_round_trips_through_the_deferred_import(tmp_path):
    out = _run(
        "from gitlab_knowledge.embeddings.vectors import lancedb\n"
        f"db = lancedb.connect({str(tmp_path)!r})\n"
        "t = db.create_table('t', data=[{'id': 1, 'vector': [0.0, 1.0]}, {'id': 2, 'vector': [1.0, 0.0]}])\n"
        "print(t.search([1.0, 0.1]).limit(1).to_list()[0]['id'], t.count_rows())\n"
    )
    assert out == "2 2"
