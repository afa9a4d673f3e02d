"""A self-managed GitLab behind a private CA: `gitlab.ca_bundle` makes the client trust it, and
without it the failure is one line, not a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

from gitlab_knowledge_sandbox import SandboxGitLab
from gitlab_knowledge_tests.conftest import subprocess_env, write_config_file


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "ca.pem", folder / "key.pem"
    made = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                           "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                           "-keyout", str(key), "-out", str(cert)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"openssl could not make a certificate: {made.stderr.strip()}")
    return cert, key


def auth_test(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gitlab_knowledge", "--config", str(config), "auth-test"],
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)


def test_a_private_ca_is_trusted_through_ca_bundle(small_dataset, certificate, tmp_path):
    cert, key = certificate
    with SandboxGitLab(dataset=small_dataset, tls=(cert, key)) as sb:
        assert sb.url.startswith("https://")
        trusted = write_config_file(tmp_path / "trusted.toml", sb, tmp_path / "data", ca_bundle=str(cert))
        ok = auth_test(trusted)
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.startswith("Authenticated as @")
        untrusted = write_config_file(tmp_path / "untrusted.toml", sb, tmp_path / "data")
        refused = auth_test(untrusted)
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "not trusted" in refused.stderr and "gitlab.ca_bundle" in refused.stderr
