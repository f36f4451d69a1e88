"""Host stages of calls (MAMBA3_JIT_LOG_LEVEL=trace): GPU idle before each call, as in the timing
protocol (flush, synchronize, call)."""
import os
import sys
import time

sys.path.insert(0, "python")
import torch
import mamba3_jit
from mamba3_jit import harness as Hn, reference as R

names = sys.argv[1].split(",")
solver = Hn.load_solver(sys.argv[2] if len(sys.argv) > 2 else "methods/main/solver.py")
mamba3_jit._native.load()
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
for name in names:
    case = Hn.load_cases(name_filter=name)[0]
    args = R.case_args(Hn.draw(case, "cuda"))
    for _ in range(3):
        solver(*args)
    torch.cuda.synchronize()
    sys.stderr.flush()
    print(f"== {name} T={sum(case['seq_lens'])} S={len(case['seq_lens'])}", file=sys.stderr, flush=True)
    hs = []
    for i in range(12):
        flush.zero_()
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        out = solver(*args)
        hs.append((time.perf_counter_ns() - t0) / 1e3)
        torch.cuda.synchronize()
        del out
    print(f"   python-side host us per call: {sorted(hs)}", file=sys.stderr, flush=True)
