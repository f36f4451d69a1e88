"""Where the host part of a call goes now: event latency without the profiler, then several
profiled calls' CPU-side timelines (runtime and driver API calls) relative to the op's start."""
import json
import statistics
import sys
import time

sys.path.insert(0, "python")
import torch
import mamba3_jit
from mamba3_jit import harness as Hn, reference as R

out_dir = sys.argv[1]
names = sys.argv[2].split(",")
solver = Hn.load_solver(sys.argv[3] if len(sys.argv) > 3 else "methods/main/solver.py")
mamba3_jit._native.load()


def host_us(fn, args, n=60):
    ts = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter_ns()
        out = fn(*args)
        ts.append((time.perf_counter_ns() - t0) / 1e3)
        del out
    torch.cuda.synchronize()
    return statistics.median(ts), min(ts)


from torch.profiler import profile, ProfilerActivity
for name in names:
    case = Hn.load_cases(name_filter=name)[0]
    args = R.case_args(Hn.draw(case, "cuda"))
    for _ in range(3):
        solver(*args)
    torch.cuda.synchronize()
    print(f"== {name} T={sum(case['seq_lens'])} S={len(case['seq_lens'])}")
    med, lo = host_us(solver, args)
    lat = Hn.median(Hn.time_calls(solver, args, device="cuda"))
    print(f"  solver host median {med:7.1f} us (min {lo:7.1f})  event latency {lat * 1e3:7.1f} us")
    med, lo = host_us(lambda *a: torch.ops.mamba3_jit.validate(*a, True), list(args))
    print(f"  validate  host median {med:7.1f} us (min {lo:7.1f})")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(6):
            flush.zero_()
            torch.cuda.synchronize()
            out = solver(*args)
            torch.cuda.synchronize()
            del out
    path = f"{out_dir}/trace_{name}.json"
    prof.export_chrome_trace(path)
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    ops = sorted([e for e in ev if "fwd_vjp" in e.get("name", "") and e.get("cat") == "cpu_op"], key=lambda e: e["ts"])
    for op in ops[-3:]:
        t0, t1 = op["ts"], op["ts"] + op["dur"]
        window = sorted([e for e in ev if t0 - 5 <= e["ts"] <= t1 + 1500 and e.get("cat") in
                         ("cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy")], key=lambda e: e["ts"])
        print(f"  profiled call: op {op['dur']:.1f} us on the host")
        for e in window:
            if e.get("cat") == "cuda_runtime" and "Synchronize" in e["name"] and e["ts"] > t1:
                continue
            print(f"    {e['ts'] - t0:9.1f} +{e['dur']:8.1f}  {e.get('cat', ''):14s} {e['name'][:70]}")
    del flush
