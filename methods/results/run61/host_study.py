"""Where the host part of a call goes: host wall time and event latency of the solver and of the
bare operator (packet, overload), the validate op, a stream sync; then one profiled call's CPU-side
timeline (runtime and driver API calls) relative to the op's start."""
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
solver = Hn.load_solver("methods/main/solver.py")
mamba3_jit._native.load()
cfg = "variant=v84,chunk=32,threads=256"
packet = torch.ops.mamba3_jit.fwd_vjp
overload = torch.ops.mamba3_jit.fwd_vjp.default


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


for name in names:
    case = Hn.load_cases(name_filter=name)[0]
    args = R.case_args(Hn.draw(case, "cuda"))
    fns = {
        "solver": solver,
        "packet": lambda *a: packet(*a, cfg),
        "overload": lambda *a: overload(*a, cfg),
    }
    for f in fns.values():
        for _ in range(3):
            f(*args)
    torch.cuda.synchronize()
    print(f"== {name} T={sum(case['seq_lens'])} S={len(case['seq_lens'])}")
    for label, f in fns.items():
        med, lo = host_us(f, args)
        lat = Hn.median(Hn.time_calls(f, args, device="cuda"))
        print(f"  {label:9s} host median {med:7.1f} us (min {lo:7.1f})  event latency {lat * 1e3:7.1f} us")
    vargs = list(args)
    med, lo = host_us(lambda *a: torch.ops.mamba3_jit.validate(*a, True), vargs)
    print(f"  validate  host median {med:7.1f} us (min {lo:7.1f})  (shapes + cu_seqlens read-back)")
    med, lo = host_us(lambda: torch.cuda.current_stream().synchronize(), [])
    print(f"  idle stream sync      {med:7.1f} us (min {lo:7.1f})")
    small = torch.zeros(8, device="cuda")
    med, lo = host_us(lambda: small.add_(1.0), [])
    print(f"  one small aten op     {med:7.1f} us (min {lo:7.1f})")
    # One profiled call, GPU idle before it.
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            torch.cuda.synchronize()
            out = solver(*args)
            torch.cuda.synchronize()
            del out
    path = f"{out_dir}/trace_{name}.json"
    prof.export_chrome_trace(path)
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    ops = sorted([e for e in ev if "fwd_vjp" in e.get("name", "") and e.get("cat") == "cpu_op"], key=lambda e: e["ts"])
    op = ops[-1]
    t0, t1 = op["ts"], op["ts"] + op["dur"]
    window = sorted([e for e in ev if t0 - 50 <= e["ts"] <= t1 + 1500], key=lambda e: e["ts"])
    print(f"  profiled call: op {op['dur']:.1f} us on the host")
    for e in window:
        print(f"    {e['ts'] - t0:9.1f} +{e['dur']:8.1f}  {e.get('cat', ''):14s} {e['name'][:70]}")
