"""Take the README's screenshot of the asset lineage in the Dagster UI, with headless Chromium.

Syncs the bundled sample (sandbox GitLab → every layer) into a temporary DAGSTER_HOME and data
directory, starts the real webserver and daemon, and photographs the global asset lineage, so the
picture shows real materializations and check results.

    .venv/bin/python scripts/screenshot_lineage.py [--out docs/lineage.png] [--chromium /usr/bin/chromium]

Needs Chromium (Debian: apt-get install chromium) and the `docs` extra (playwright, which drives
the system Chromium; no browser download).
"""

import argparse
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gitlab_knowledge.cli.dagster_server import WORKSPACE, DagsterServer  # noqa: E402
from gitlab_knowledge.defs.runner import instance_yaml, run_sync  # noqa: E402
from gitlab_knowledge.workspace import Workspace  # noqa: E402
from gitlab_knowledge_sandbox import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def screenshot(chromium: str, url: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        # Debian's Chromium; these flags keep it off a network it cannot reach (machine notes).
        browser = pw.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        # A wide layout rendered at 0.7: the five layers fit side by side in ~1900 pixels.
        page = browser.new_page(viewport={"width": 2700, "height": 1000}, device_scale_factor=0.7)
        page.goto(url, wait_until="networkidle", timeout=60_000)
        skip = page.get_by_role("button", name="Skip")  # the first-visit "join the community" dialog
        if skip.count():
            skip.first.click()
        everything = page.get_by_role("button", name="All", exact=True)  # graph depth: the whole chain
        if everything.count():
            everything.first.click()
        hide = page.get_by_text("Hide navigation")
        if hide.count():
            hide.first.click()
        page.wait_for_timeout(3000)
        page.screenshot(path=str(out))
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "lineage.png"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--path", default="/assets/raw_gitlab_payloads?view=lineage&lineageScope=downstream",
                        help="UI page to photograph")
    args = parser.parse_args()
    os.environ["GITLAB_TOKEN"] = DEFAULT_TOKEN
    os.environ["GITLAB_KNOWLEDGE_AUTOMATION"] = "off"
    with tempfile.TemporaryDirectory(prefix="gk-shot-") as tmp, SandboxGitLab(dataset=SAMPLE_DATASET) as sandbox:
        work = Path(tmp)
        home = work / "dagster"
        home.mkdir()
        (home / "dagster.yaml").write_text(instance_yaml(home))
        (work / "workspace.yaml").write_text(WORKSPACE)
        projects = [p["path_with_namespace"] for p in sandbox.state.list_projects(order_by="id", sort="asc")]
        config_path = work / "gitlab_knowledge.toml"
        config_path.write_text(f"projects = {projects!r}\n".replace("'", '"') +
                               f'[gitlab]\nurl = "{sandbox.url}"\nrate_limit = 0\n[storage]\ndata_dir = "{work / "data"}"\n')
        os.environ["DAGSTER_HOME"] = str(home)
        os.environ["GITLAB_KNOWLEDGE_CONFIG"] = str(config_path)
        from dagster import DagsterInstance

        outcomes = run_sync(Workspace.load(config_path), projects, instance=DagsterInstance.get())
        assert all(o.success for o in outcomes), [o.message for o in outcomes]
        with DagsterServer(home, work / "workspace.yaml", port=free_port(), log=work / "dagster.log") as server:
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            screenshot(args.chromium, server.url + args.path, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
