"""The embedding server goes down between syncs: the sync fails with exit 6 and one line (its run
is a failure in Dagster), while documents and the lexical index are kept up to date and the
documents that could not be embedded are recorded; search falls
back to keywords with the documented warning and still finds the new text, and once the server
is back the next sync embeds exactly those documents."""

import json
import subprocess

from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_tests.conftest import forked, subprocess_env, write_config_file
from gitlab_knowledge_tests.support.fake_ollama import FakeOllama

NOTE = "Ownership of the zeppelin-cache migration moves to the platform team"


def cli(*args: str, config, env) -> subprocess.CompletedProcess:
    return forked(["gitlab_knowledge", "--config", str(config), *args], env=env, timeout=300)


def search(query: str, config, env) -> dict:
    run = forked(["gitlab_knowledge.search", query, "--json", "--config", str(config)], env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_embedding_server_down_during_a_sync(tiny_dataset, tmp_path):
    # The tiny dataset: seven CLI processes, three of them syncs; the drill is about one note's
    # document, whatever else the project holds.
    fake = FakeOllama().start()
    port = int(fake.url.rsplit(":", 1)[1])
    with SandboxGitLab(dataset=tiny_dataset) as sb:
        config = write_config_file(tmp_path / "gitlab_knowledge.toml", sb, tmp_path / "data")
        env = subprocess_env(GITLAB_KNOWLEDGE_EMBEDDING="ollama", OLLAMA_HOST=fake.url)
        assert cli("sync", config=config, env=env).returncode == 0
        fake.stop()

        project = sb.state.list_projects(order_by="id", sort="asc")[0]["path_with_namespace"]
        issue = sb.state.list_items(project, "issues")[0]
        sb.clock.advance(3600)
        sb.state.add_note(project, "issues", issue["iid"], NOTE)
        down = cli("sync", "--json", config=config, env=env)
        assert down.returncode == 6, down.stderr
        result = {p["project"]: p for p in json.loads(down.stdout)["projects"]}[project]
        assert result["embedding_failures"] >= 1 and "not reachable" in result["embedding_error"]
        assert not result["success"] and "could not be embedded" in result["error"]
        errors = [line for line in down.stderr.splitlines() if line.startswith("error:")]
        assert errors and all("could not be embedded" in line for line in errors), down.stderr
        assert "Traceback" not in down.stderr
        status = json.loads(cli("index", "status", "--json", config=config, env=env).stdout)
        row = next(p for p in status["projects"] if p["project"] == project)
        assert row["vectors"]["failed"] >= 1 and row["lexical"]["unindexed"] == 0

        found = search("zeppelin-cache migration ownership", config, env)
        assert "Embedding service unavailable, using lexical search only" in found["warnings"]
        assert found["effective_mode"] == "lexical" and "zeppelin" in found["results"][0]["snippet"]

        back = FakeOllama(port=port).start()
        try:
            up = cli("sync", "--json", config=config, env=env)
            assert up.returncode == 0, up.stderr
            result = {p["project"]: p for p in json.loads(up.stdout)["projects"]}[project]
            assert result["embedded"] == row["vectors"]["failed"] and result["embedding_failures"] == 0
            status = json.loads(cli("index", "status", "--json", config=config, env=env).stdout)
            assert all(p["vectors"]["failed"] == 0 and p["vectors"]["unindexed"] == 0 for p in status["projects"])
            again = search("zeppelin-cache migration ownership", config, env)
            assert again["effective_mode"] == "hybrid" and not again["warnings"]
            assert "zeppelin" in again["results"][0]["snippet"]
        finally:
            back.stop()
