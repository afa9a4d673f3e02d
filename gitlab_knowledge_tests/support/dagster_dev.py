"""The real Dagster webserver and daemon (`dagster dev`) as a subprocess group, for end-to-end
tests: a free port, DAGSTER_HOME in a temp dir, GraphQL helpers, and a stop that always ends the
whole group (webserver, daemon, code server, run workers), even when the test fails."""

import contextlib
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx

from gitlab_knowledge.cli.dagster_server import WORKSPACE, DagsterServer
from gitlab_knowledge.defs.jobs import QUIET_LOGS
from gitlab_knowledge.defs.runner import instance_yaml

REPOSITORY = {"repositoryLocationName": "gitlab_knowledge", "repositoryName": "__repository__"}
DONE = ("SUCCESS", "FAILURE", "CANCELED")
# The repository's instance settings, with the run queue read every second instead of Dagster's
# default five: a test waits on every run it launches (and on every run a sensor launches) to
# leave the queue, and nothing a test checks depends on how often the daemon looks.
RUN_QUEUE = """
run_coordinator:
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class DagsterDev(DagsterServer):
    """dagster dev on a free port with a temp DAGSTER_HOME, plus GraphQL helpers."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        home = workdir / "dagster"
        home.mkdir(parents=True, exist_ok=True)
        (home / "dagster.yaml").write_text(instance_yaml(home) + RUN_QUEUE)
        workspace = workdir / "workspace.yaml"
        workspace.write_text(WORKSPACE)
        super().__init__(home, workspace, port=free_port(), env=env, log=workdir / "dagster-dev.log")

    def __exit__(self, *exc: object) -> None:
        """End the whole group at once. How `dagster dev` shuts down on a signal is the `ui`
        command's business (e2e/test_ui_stop.py stops it that way); a test that is done with its
        instance has read what it checks, and the graceful stop only made it wait (5-12 s)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        self.stop()  # the relay thread, and anything the group left behind

    def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}}, timeout=60)
        response.raise_for_status()
        body = response.json()
        assert "errors" not in body, body["errors"]
        return body["data"]

    def add_partition(self, key: str) -> None:
        result = self.gql("""mutation($r: RepositorySelector!, $k: String!) {
            addDynamicPartition(repositorySelector: $r, partitionsDefName: "gitlab_projects", partitionKey: $k) {
              __typename ... on PythonError { message } } }""", {"r": REPOSITORY, "k": key})
        assert result["addDynamicPartition"]["__typename"] in ("AddDynamicPartitionSuccess", "DuplicateDynamicPartitionError")

    def launch(self, job: str, partition: str | None, config_path: Path | None = None) -> str:
        """Launch `job` as the UI's Launchpad does; `config_path` names the gitlab_knowledge config
        the run reads (run config, as the resource allows) instead of the one in the server's
        environment, so tests with their own GitLab and store can share one server."""
        tags = [{"key": "dagster/partition", "value": partition}] if partition else []
        params: dict[str, Any] = {"selector": {**REPOSITORY, "jobName": job}, "executionMetadata": {"tags": tags}}
        if config_path is not None:
            params["runConfigData"] = {**QUIET_LOGS, "resources": {"workspace": {"config": {
                "config_path": str(config_path)}}}}
        result = self.gql("""mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
            __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
            ... on RunConfigValidationInvalid { errors { message } } } }""", {"p": params})
        assert result["launchRun"]["__typename"] == "LaunchRunSuccess", result
        return result["launchRun"]["run"]["runId"]

    def wait_run(self, run_id: str, timeout: float = 240) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.gql("query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }",
                              {"id": run_id})["runOrError"]["status"]
            if status in DONE:
                return status
            time.sleep(0.5)
        raise AssertionError(f"run {run_id} still not finished after {timeout}s")

    def check_results(self, run_id: str) -> dict[str, bool]:
        events = self.gql("""query($id: ID!) { runOrError(runId: $id) { ... on Run { eventConnection(afterCursor: null) {
            events { __typename ... on AssetCheckEvaluationEvent { evaluation { checkName success } } } } } } }""",
                          {"id": run_id})["runOrError"]["eventConnection"]["events"]
        return {e["evaluation"]["checkName"]: e["evaluation"]["success"] for e in events
                if e["__typename"] == "AssetCheckEvaluationEvent"}

    def timings(self, run_id: str) -> dict[str, Any]:
        """The run's start/end and each step's start/end (unix seconds)."""
        run = self.gql("""query($id: ID!) { runOrError(runId: $id) { ... on Run { startTime endTime status
            stepStats { stepKey startTime endTime status } } } }""", {"id": run_id})["runOrError"]
        return run

    def start_sensor(self, name: str) -> None:
        result = self.gql("""mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
            __typename ... on Sensor { sensorState { status } } ... on PythonError { message } } }""",
                          {"s": {**REPOSITORY, "sensorName": name}})
        assert result["startSensor"]["__typename"] == "Sensor", result

    def stop_sensor(self, name: str) -> None:
        """Stop the sensor, and return once no tick of it is still being evaluated: a tick under
        way when it stopped has launched what it asked for by then."""
        query = """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { __typename
            ... on Sensor { id sensorState { status ticks(limit: 1) { status } } } } }"""
        found = self.gql(query, {"s": {**REPOSITORY, "sensorName": name}})["sensorOrError"]
        assert found["__typename"] == "Sensor", found
        result = self.gql("""mutation($id: String) { stopSensor(id: $id) { __typename
            ... on StopSensorMutationResult { instigationState { status } } ... on PythonError { message } } }""",
                          {"id": found["id"]})
        assert result["stopSensor"]["__typename"] == "StopSensorMutationResult", result
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            ticks = self.gql(query, {"s": {**REPOSITORY, "sensorName": name}})["sensorOrError"]["sensorState"]["ticks"]
            if not ticks or ticks[0]["status"] != "STARTED":
                return
            time.sleep(0.5)
        raise AssertionError(f"a tick of {name} was still being evaluated 120 s after it stopped")

    def reset_sensor(self, name: str) -> None:
        """Back to the status in code (stopped, with GITLAB_KNOWLEDGE_AUTOMATION=off)."""
        result = self.gql("""mutation($s: SensorSelector!) { resetSensor(sensorSelector: $s) {
            __typename ... on Sensor { sensorState { status } } ... on PythonError { message } } }""",
                          {"s": {**REPOSITORY, "sensorName": name}})
        assert result["resetSensor"]["__typename"] == "Sensor", result

    def runs(self, tag_key: str, tag_value: str) -> list[dict[str, str]]:
        data = self.gql("""query($f: RunsFilter) { runsOrError(filter: $f) { ... on Runs { results {
            runId status tags { key value } } } } }""", {"f": {"tags": [{"key": tag_key, "value": tag_value}]}})
        return data["runsOrError"]["results"]
