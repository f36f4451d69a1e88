"""Finds, builds if needed, and loads the compiled operator library."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import torch

_PKG_DIR = Path(__file__).resolve().parent
_REPO = _PKG_DIR.parent.parent
_LIB = _PKG_DIR / "lib" / "libmamba3_jit_torch.so"
_lock = threading.Lock()
_loaded = False


def library_path() -> Path:
    return _LIB


def _build() -> None:
    script = _REPO / "tools" / "build.sh"
    if os.environ.get("MAMBA3_JIT_NO_AUTOBUILD"):
        raise RuntimeError(
            f"mamba3_jit: {_LIB} is missing and MAMBA3_JIT_NO_AUTOBUILD is set; run {script}")
    if not script.exists():
        raise RuntimeError(f"mamba3_jit: {_LIB} is missing and there is no {script} to build it")
    print(f"mamba3_jit: building the operator library with {script} (first use)...",
          file=sys.stderr, flush=True)
    # Catch2 is only needed for the C++ tests; the operator build must not depend on it.
    proc = subprocess.run(["bash", str(script), "-DMAMBA3_JIT_BUILD_TESTS=OFF"],
                          stdout=sys.stderr, stderr=sys.stderr)
    if proc.returncode != 0 or not _LIB.exists():
        raise RuntimeError(f"mamba3_jit: building the operator library failed (exit {proc.returncode})")


def load() -> None:
    """Loads the library once per process; later calls return at once."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        if not _LIB.exists():
            _build()
        torch.ops.load_library(str(_LIB))
        _loaded = True


_ops: dict = {}


def op(name: str):
    """The native op `name`'s one overload (loading the library on first use), resolved once:
    calling it directly skips the op packet's overload resolution, about 2 us of every call's host
    time, which the GPU spends idle before the first launch."""
    resolved = _ops.get(name)
    if resolved is None:
        load()
        resolved = _ops[name] = getattr(torch.ops.mamba3_jit, name).default
    return resolved
