"""`python -m gitlab_knowledge_sandbox serve|generate` as real subprocesses."""

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from gitlab_knowledge_sandbox import DEFAULT_TOKEN, Dataset, load_dataset, write_dataset

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVE_LINE = re.compile(r"Sandbox GitLab at (http://127\.0\.0\.1:\d+) \(dataset: (.+), (\d+) projects, "
                        r"(\d+) issues, (\d+) merge requests\)")


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitlab_knowledge_sandbox", *args], cwd=REPO_ROOT, env=_env(),
                          capture_output=True, text=True, timeout=timeout)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def read_first_line(proc: subprocess.Popen[str], timeout: float = 20) -> str:
    """The first stdout line, without hanging the suite if the server never prints."""
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline() if proc.stdout else ""), daemon=True)
    reader.start()
    reader.join(timeout)
    if not box:
        proc.kill()
        pytest.fail("serve printed nothing")
    return box[0].rstrip("\n")


@pytest.fixture
def dataset_dir(tiny_dataset: Dataset, tmp_path: Path) -> Path:
    return write_dataset(tiny_dataset, tmp_path / "ds")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serve_prints_url_serves_and_exits_cleanly(dataset_dir: Path, signum: int) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitlab_knowledge_sandbox", "serve", "--data", str(dataset_dir), "--port", "0"],
        cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = read_first_line(proc)
        match = SERVE_LINE.fullmatch(line)
        assert match, line
        url = match.group(1)
        assert (match.group(2), match.group(3), match.group(4), match.group(5)) == (str(dataset_dir), "2", "6", "2")
        response = httpx.get(f"{url}/api/v4/projects/101/issues", headers={"PRIVATE-TOKEN": DEFAULT_TOKEN})
        assert response.status_code == 200
        assert len(response.json()) == 5
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == 0
        assert proc.stderr is not None and "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_options(dataset_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitlab_knowledge_sandbox", "serve", "--data", str(dataset_dir), "--token", "t0k",
         "--faults", "503:count=1", "--rate-limit", "100", "--latency-ms", "1"],
        cwd=REPO_ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        match = SERVE_LINE.fullmatch(read_first_line(proc))
        assert match
        with httpx.Client(base_url=match.group(1) + "/api/v4", headers={"PRIVATE-TOKEN": "t0k"}) as client:
            assert client.get("/user").status_code == 503
            ok = client.get("/user")
            assert ok.status_code == 200
            assert ok.headers["ratelimit-limit"] == "100"
        proc.terminate()
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("args", [
    ["serve", "--data", "/nonexistent/dataset"],
    ["serve", "--port", "http"],
    ["serve", "--faults", "teapot:p=1"],
    ["serve", "--rate-limit", "-3"],
    ["bogus"],
    ["generate"],
])
def test_bad_arguments_exit_2_with_one_line(args: list[str], dataset_dir: Path) -> None:
    if args[0] == "serve" and "--data" not in args:
        args = [*args, "--data", str(dataset_dir)]  # so only the bad option can be the reason
    result = run_cli(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    if "--faults" in args:
        assert "bad --faults" in result.stderr


def test_unreadable_dataset_exits_2(tmp_path: Path) -> None:
    (tmp_path / "dataset.json").write_text("{not json")
    result = run_cli("serve", "--data", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("sandbox: error: cannot load dataset:")
    assert len(result.stderr.strip().splitlines()) == 1


def test_generate_writes_a_loadable_dataset(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    result = run_cli("generate", "--out", str(out), "--projects", "3", "--issues", "25", "--mrs", "9", "--seed", "4")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    match = re.fullmatch(r"Generated .+: 3 projects, 25 issues, 9 merge requests, (\d+) discussions, (\d+) notes "
                         r"\(\d+ system\), (\d+) documents \(seed 4, .+\)", lines[0])
    assert match, lines[0]
    counts = load_dataset(out).counts()
    assert (counts["projects"], counts["issues"], counts["merge_requests"]) == (3, 25, 9)
    assert (str(counts["discussions"]), str(counts["notes"]), str(counts["documents"])) == match.groups()
