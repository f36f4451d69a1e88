import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
for p in (REPO / "python", REPO):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

# The contract files live in a sibling checkout; tests that need them skip when it is absent.
# Where the checkout is copied without that sibling (e.g. onto a GPU machine), the variable
# points at wherever the contract files were put instead.
SHARED_ENV = "MAMBA3_JIT_SHARED_DIR"
SHARED = (Path(os.environ[SHARED_ENV]).expanduser() if os.environ.get(SHARED_ENV)
          else REPO.parent / "shared")


def pytest_collection_modifyitems(config, items):
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_dir():
    if not SHARED.is_dir():
        pytest.skip(f"contract files not found: {SHARED} is absent (set {SHARED_ENV} to "
                    "their folder)")
    return SHARED


@pytest.fixture(scope="session")
def small_vectors(shared_dir):
    import torch

    path = shared_dir / "cases" / "vectors_small.pt"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    return torch.load(path)


# ---- the reliability summary ----------------------------------------------------------------
# Tests that reject a bad input, pass an edge shape against the float64 truth or survive an
# injected fault say so here, and the run ends with one line counting them. Distinct names are
# counted, so a class exercised by several tests (or parametrisations) counts once.
RELIABILITY_CATEGORIES = ("bad_input", "edge_shape", "fault")


class ReliabilityRecorder:
    def __init__(self):
        self.names = {c: set() for c in RELIABILITY_CATEGORIES}

    def record(self, category, name):
        if category not in self.names:
            raise ValueError(f"unknown reliability category {category!r}; expected one of "
                             f"{RELIABILITY_CATEGORIES}")
        self.names[category].add(str(name))

    def summary(self):
        n = {c: len(v) for c, v in self.names.items()}
        return (f"reliability: {n['bad_input']} bad-input classes rejected, "
                f"{n['edge_shape']} edge shapes passed, "
                f"{n['fault']} faults injected and survived")


_RELIABILITY = ReliabilityRecorder()


@pytest.fixture(scope="session")
def reliability():
    return _RELIABILITY


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    terminalreporter.write_line(_RELIABILITY.summary())
