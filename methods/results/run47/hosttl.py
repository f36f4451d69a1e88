"""Timeline of one bench-like call (L2 flushed, device synchronised, then the call) on the cases
named in M3_CASES_LIST: host ops, runtime calls and GPU work relative to the call's start, and the
event-timed latency next to the sum of kernel durations.

Run 47, from the repository root on the GPU: M3_CASES=<visible_cases.json> M3_CASES_LIST=c01,c00
python3 methods/results/run47/hosttl.py (M3_SOLVER picks the solver, methods/main by default)."""
import os, sys, json, tempfile
sys.path.insert(0, "python")
import torch
from mamba3_jit import harness as Hn
from torch.profiler import profile, ProfilerActivity
fn = Hn.load_solver(os.environ.get("M3_SOLVER", "methods/main/solver.py"))
flush = torch.empty(Hn.FLUSH_BYTES, dtype=torch.uint8, device="cuda")
for name in os.environ.get("M3_CASES_LIST", "c01,c00").split(","):
    case = Hn.load_cases(os.environ["M3_CASES"], name)[0]
    args = Hn.draw(case, torch.device("cuda"))
    args = [args[n] for n in Hn.R.ARG_NAMES] if isinstance(args, dict) else args
    for _ in range(5):
        fn(*args)
    lat = Hn.median(Hn.time_calls(fn, args, device="cuda", warmup=2, iters=20))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            flush.zero_(); torch.cuda.synchronize(); out = fn(*args); del out
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    ops = sorted([e for e in ev if e["name"].startswith("mamba3_jit::fwd_vjp")], key=lambda e: e["ts"])
    last = ops[-1]
    t0 = last["ts"]
    gpu = sorted([e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["ts"] >= t0 - 5], key=lambda e: e["ts"])
    gpu = [e for e in gpu if e["ts"] < t0 + 5000]
    kern = sum(e["dur"] for e in gpu)
    print(f"\n== {name} T={sum(case['seq_lens'])}: event latency {lat * 1e3:.1f} us, op span {last['dur']:.1f} us, "
          f"GPU work after the op's start {kern:.1f} us, last GPU end at +{gpu[-1]['ts'] + gpu[-1]['dur'] - t0:.1f} us")
    prev = None
    for e in gpu:
        gap = "" if prev is None else f" gap {e['ts'] - prev:7.1f}"
        print(f"  GPU +{e['ts'] - t0:8.1f} dur {e['dur']:8.1f}{gap}  {e['name'][:50]}")
        prev = e["ts"] + e["dur"]
    rows = [e for e in ev if t0 - 5 <= e["ts"] <= t0 + last["dur"] + 5 and e is not last and e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    for e in sorted(rows, key=lambda e: e["ts"])[:60]:
        print(f"  CPU +{e['ts'] - t0:8.1f} dur {e['dur']:8.1f}  {e.get('cat', '')[:12]:12s} {e['name'][:60]}")
