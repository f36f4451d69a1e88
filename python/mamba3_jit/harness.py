"""Helpers shared by tools/selfcheck.py and tools/bench.py: cases, solver loading, input drawing,
bitwise checks and the timing protocol of SPEC section 6.

Imports torch and the reference only, never the compiled library: the solver under test is
loaded from its file, and it decides what it imports.
"""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from . import reference as R

PACKAGE_DIR = Path(__file__).resolve().parent
REPO = PACKAGE_DIR.parents[1]
DEFAULT_CASES = PACKAGE_DIR / "data" / "visible_cases.json"
DEFAULT_SOLVER = REPO / "methods" / "main" / "solver.py"
ENTRY_POINT = "mamba3_siso_varlen_joint_states_full_vjp"

FLUSH_BYTES = 256 << 20
WARMUP = 3
ITERS = 20
# Seed offset of the "other inputs" drawn between two calls on the same inputs.
OTHER_SEED_OFFSET = 7919


def log(*parts):
    print(*parts, flush=True)


def load_cases(path=DEFAULT_CASES, name_filter=None) -> list:
    """Cases of a panel file; ``name_filter`` keeps those whose name contains it (comma-separated
    alternatives allowed)."""
    with open(path) as f:
        cases = json.load(f)["cases"]
    if name_filter:
        wanted = [w for w in name_filter.split(",") if w]
        cases = [c for c in cases if any(w in c["name"] for w in wanted)]
    return cases


def load_solver(path=DEFAULT_SOLVER):
    """The entry point of a solver file, imported by path under a name of its own so that
    several solvers can be loaded side by side."""
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"solver file not found: {path}")
    name = f"_m3_solver_{abs(hash(str(path))):x}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    fn = getattr(module, ENTRY_POINT, None)
    if not callable(fn):
        raise AttributeError(f"{path} has no callable {ENTRY_POINT}")
    return fn


def draw(case: dict, device, seed_offset: int = 0) -> dict:
    """The inputs of a case, drawn on the CPU and then moved to ``device``."""
    return R.make_case(case["seq_lens"], case["seed"] + seed_offset, device=device)


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape, device and bits (so NaNs of the same payload compare equal, and -0.0
    differs from 0.0)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.detach().reshape(-1).view(torch.uint8),
                       b.detach().reshape(-1).view(torch.uint8))


def mismatches(names, xs, ys) -> list:
    """Names whose tensors differ bitwise (or are missing on either side)."""
    xs, ys = list(xs), list(ys)
    out = [n for n, a, b in zip(names, xs, ys) if not bitwise_equal(a, b)]
    return out + list(names[min(len(xs), len(ys)):])


def time_calls(fn, args, *, device, warmup=WARMUP, iters=ITERS, flush_bytes=FLUSH_BYTES) -> list:
    """Milliseconds of ``iters`` calls of ``fn(*args)`` after ``warmup`` calls.

    Before each timed call L2 is flushed by writing ``flush_bytes`` and the device is
    synchronised, so that the host time of the call shows up between the two events. On a CPU
    device (development only) the wall clock replaces the events and nothing is flushed.
    """
    cuda = torch.device(device).type == "cuda"
    for _ in range(warmup):
        fn(*args)
    synchronize(device)
    if not cuda:
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            out = fn(*args)
            times.append((time.perf_counter() - t0) * 1e3)
            del out
        return times
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        flush.zero_()
        torch.cuda.synchronize(device)
        starts[i].record()
        out = fn(*args)
        ends[i].record()
        del out
    torch.cuda.synchronize(device)
    del flush
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def median(xs) -> float:
    return float(statistics.median(xs))


def geomean(xs) -> float:
    xs = list(xs)
    if not xs or any(not x > 0 for x in xs):
        return float("nan")
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def release(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()
