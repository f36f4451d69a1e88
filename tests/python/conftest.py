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
