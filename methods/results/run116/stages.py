"""Run 116: where one call's host time goes. `stages.py run SOLVER CASE` times 40 calls as the
harness does (L2 flushed, synchronised before each) and prints the median event latency and the
median wall time of the call on the host; with MAMBA3_JIT_LOG_LEVEL=trace the operator logs its
host stages to stderr, and `stages.py summarize LOG` prints each stage's median."""
import re
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run(solver_path, case_name):
    sys.path.insert(0, str(REPO / "python"))
    import torch
    from mamba3_jit import harness
    case = next(c for c in harness.load_cases() if c["name"] == case_name)
    fn = harness.load_solver(solver_path)
    args = list(harness.draw(case, "cuda").values())
    for _ in range(3):
        fn(*args)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    lat, wall = [], []
    for _ in range(40):
        flush.zero_()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        t0 = time.perf_counter()
        out = fn(*args)
        wall.append((time.perf_counter() - t0) * 1e6)
        e.record()
        torch.cuda.synchronize()
        lat.append(s.elapsed_time(e) * 1e3)
        del out
    print(f"{case_name} {solver_path}: latency median {statistics.median(lat):.1f} us, "
          f"host wall of the call median {statistics.median(wall):.1f} us")


def summarize(log_path):
    stages = {}
    for line in open(log_path):
        m = re.search(r"host stages \(us\) of a call with T=(\d+) S=\d+: (.*); total ([\d.]+)", line)
        if not m:
            continue
        for part in m.group(2).split(", "):
            name, value = part.rsplit(" ", 1)
            stages.setdefault(name, []).append(float(value))
        stages.setdefault("total", []).append(float(m.group(3)))
    print("  " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in stages.items()) +
          f" (medians of {len(stages.get('total', []))} calls)")


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    else:
        summarize(sys.argv[2])
