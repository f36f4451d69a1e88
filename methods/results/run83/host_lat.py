"""Event latency (the timing protocol: flush, synchronize, events around the call) of the solver
in this process's host-path setting (MAMBA3_JIT_HOSTEXP), several cases, 3 x 20 calls."""
import os
import sys

sys.path.insert(0, "python")
import torch
import mamba3_jit
from mamba3_jit import harness as Hn, reference as R

names = sys.argv[1].split(",")
solver = Hn.load_solver("methods/main/solver.py")
mamba3_jit._native.load()
tag = os.environ.get("MAMBA3_JIT_HOSTEXP", "0")
for name in names:
    case = Hn.load_cases(name_filter=name)[0]
    args = R.case_args(Hn.draw(case, "cuda"))
    meds = [Hn.median(Hn.time_calls(solver, args, device="cuda")) * 1e3 for _ in range(3)]
    print(f"exp={tag} {name} latency us {' '.join(f'{m:7.1f}' for m in meds)}  min-of-medians {min(meds):7.1f}", flush=True)
