"""A small tmpfs for the tests that fill a disk: mounted under the test's tmp_path, skipped where
this sandbox may not mount (mounting needs CAP_SYS_ADMIN), always unmounted."""

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted_tmpfs(mount: Path, size: str) -> Iterator[Path]:
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs CAP_SYS_ADMIN): {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
