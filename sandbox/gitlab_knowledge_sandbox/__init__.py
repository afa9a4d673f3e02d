"""Sandbox GitLab: a local HTTP server that behaves like GitLab's REST API v4 over a dataset
directory, for testing and benchmarking the sync client over real sockets."""

from .clock import SandboxClock
from .dataset import Dataset, DatasetError, load_dataset, write_dataset
from .faults import FaultSpecError
from .generate import generate_dataset
from .server import DEFAULT_TOKEN, SAMPLE_DATASET, SandboxGitLab
from .state import SandboxState

__all__ = [
    "DEFAULT_TOKEN",
    "SAMPLE_DATASET",
    "Dataset",
    "DatasetError",
    "FaultSpecError",
    "SandboxClock",
    "SandboxGitLab",
    "SandboxState",
    "generate_dataset",
    "load_dataset",
    "write_dataset",
]
