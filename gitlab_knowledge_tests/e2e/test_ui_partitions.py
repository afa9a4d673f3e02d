"""The Dagster UI at 300 project partitions (issue 24): the real webserver over 300 generated
projects in nested groups, three of them synced (so their partitions have materializations and
check results), photographed in headless Chromium driven by Playwright.

The three are synced by one `sync` (one batch run, `sync_projects`: one step for every project, as
the change sensor's runs are); the UI shows each project's partition from it.

What an operator does to find one project among hundreds, asserted on what the page shows:
the asset page of `raw_gitlab_payloads`; its Partitions tab (300 partitions, 3 materialized, 297
missing); the tab's filter box, typed in another case, narrowing the list to the project; the
project's materialization; and its per-partition check results, which live under Checks -> a check
-> Partitions (the Partitions tab's detail pane shows no checks).

Needs Chromium (Debian: apt-get install chromium; CHROMIUM names another binary) and the `docs`
extra (playwright, which drives that Chromium: no browser download). Either missing fails the
test with one line saying so. Slow (a sync and a webserver): run with --runslow; .ci/run runs it.
Screenshots go to the test's tmp dir (GITLAB_KNOWLEDGE_SCREENSHOTS names another directory)."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitlab_knowledge_sandbox import SandboxGitLab, generate_dataset
from gitlab_knowledge_tests.conftest import subprocess_env
from gitlab_knowledge_tests.support.dagster_dev import DagsterDev
from gitlab_knowledge_tests.support.fake_ollama import FakeOllama

pytestmark = pytest.mark.slow

PARTITIONS = 300
# Debian's Chromium, kept off a network it cannot reach (as scripts/screenshot_lineage.py runs it).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 60_000  # Playwright polls up to this for each thing the page must show


def chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).is_file():
        pytest.fail(f"Chromium not found at {path}: apt-get install chromium (or set CHROMIUM)", pytrace=False)
    if importlib.util.find_spec("playwright") is None:
        pytest.fail("playwright is not installed: pip install -e '.[docs]'", pytrace=False)
    return path


def test_an_operator_finds_one_project_among_300_partitions(tmp_path: Path) -> None:
    browser_path = chromium()
    from dagster import DagsterInstance
    from playwright.sync_api import expect, sync_playwright

    from gitlab_knowledge.defs.partitions import ensure_partitions

    shots = Path(os.environ.get("GITLAB_KNOWLEDGE_SCREENSHOTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    dataset = tmp_path / "dataset"
    generate_dataset(dataset, projects=PARTITIONS, issues=PARTITIONS, mrs=0, seed=5, threads_per_parent_mean=1.0,
                     group_depth=3, group_fanout=3)
    with SandboxGitLab(dataset=dataset) as sb, FakeOllama() as ollama:
        paths = [p.data["path_with_namespace"] for p in sb.state.projects]
        target = paths[27]  # three subgroups deep
        assert target.count("/") == 4, target
        synced = [paths[0], paths[1], target]
        config = tmp_path / "gitlab_knowledge.toml"
        config.write_text("projects = [" + ", ".join(f'"{p}"' for p in paths) + "]\n"
                          f'[gitlab]\nurl = "{sb.url}"\nrate_limit = 0\n[storage]\ndata_dir = "{tmp_path / "data"}"\n'
                          f'[embedding]\nprovider = "ollama"\nollama_host = "{ollama.url}"\n')
        env = subprocess_env(GITLAB_KNOWLEDGE_CONFIG=str(config), GITLAB_KNOWLEDGE_AUTOMATION="off")
        dagster = DagsterDev(tmp_path, env)
        ensure_partitions(DagsterInstance.from_config(str(dagster.home)), paths)
        # The three in one sync: one batch run (`sync_projects`, one step), as the change sensor and
        # the weekly reconciliation sync many projects; the UI shows each project's partition from it.
        sync = subprocess.run([sys.executable, "-m", "gitlab_knowledge", "sync",
                               *(arg for project in synced for arg in ("--project", project))],
                              env=dagster.env, capture_output=True, text=True, timeout=900)
        assert sync.returncode == 0, sync.stderr[-3000:]
        instance = DagsterInstance.from_config(str(dagster.home))
        [batch] = instance.get_runs()
        assert batch.job_name == "sync_projects"
        short_id = batch.run_id[:8]  # how the UI names a run

        with dagster, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=browser_path, args=FLAGS)
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            asset = f"{dagster.url}/assets/raw_gitlab_payloads"

            def visit(url: str) -> None:
                page.goto(url, wait_until="networkidle", timeout=WAIT_MS)
                skip = page.get_by_role("button", name="Skip")  # the first visit's "join the community"
                if skip.count():
                    skip.first.click()

            def shows(text: str, **kwargs: Any) -> None:
                expect(page.get_by_text(text, **kwargs).first).to_be_visible(timeout=WAIT_MS)

            def row(key: str) -> Any:
                # A list row shows a long key cut in the middle; its title holds the whole key.
                return page.locator(f'[title="{key}"]')

            # The asset page: its last materialization is one of the synced projects.
            visit(asset)
            shows("Latest materialization")
            shows("Latest check results")
            page.screenshot(path=str(shots / "1-asset.png"))

            # The Partitions tab: every project a partition, coloured by its last materialization.
            visit(f"{asset}?view=partitions")
            shows(f"{PARTITIONS} Partitions Selected")
            shows("Materialized (3)")
            shows(f"Missing ({PARTITIONS - 3})")
            page.screenshot(path=str(shots / "2-partitions.png"))

            # Its filter box matches any part of the key, in any case.
            typed = "/".join(target.split("/")[-2:]).upper()
            page.get_by_placeholder("Filter by name").fill(typed)
            expect(row(target)).to_be_visible()
            expect(row(paths[0])).to_have_count(0)
            row(target).click()
            expect(page).to_have_url(f"{asset}?view=partitions&partition={target.replace('/', '%2F')}")
            shows("Materialized", exact=True)
            expect(page.locator("body")).to_contain_text(f"{target} (incremental sync")  # the summary names it
            shows(short_id)  # the batch run materialized it, in the job of many projects
            shows("sync_projects")
            page.mouse.move(1500, 900)  # off the row: its tooltip would cover the list
            page.screenshot(path=str(shots / "3-partition-filtered.png"))

            # Per-partition checks: Checks -> the check -> Partitions, filtered the same way.
            matching = sum(typed.lower() in p.lower() for p in paths)
            for check in ("cursors_within_data", "layers_caught_up"):
                visit(f"{asset}?view=checks&checkDetail={check}")
                shows("projects_synced_recently", exact=True)  # the asset's checks, listed
                page.locator("button[role=tab]#partitions").click()  # the check's own Partitions tab
                shows(f"{PARTITIONS} partitions selected")  # the partition picker
                shows("Passed (3)")
                shows(f"Missing ({PARTITIONS - 3})")
                page.get_by_placeholder("Filter by partition").fill(typed)
                shows(f"{matching} Partitions Selected")
                row(target).click()
                shows("Passed", exact=True)
                shows("Latest execution")
                shows(short_id)  # evaluated by the batch run, on the partition's latest materialization
                shows("Target materialization")
                expect(page.locator("body")).to_contain_text(f"scope{target}")  # the result's metadata
                page.mouse.move(1500, 900)
                page.screenshot(path=str(shots / f"4-check-{check}.png"))
            browser.close()
    print(f"\nscreenshots: {shots}")
