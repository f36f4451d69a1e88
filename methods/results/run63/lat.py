"""SPEC-protocol latency medians (20 calls after 3, L2 flushed, events around the call) of a
solver on every visible case, plus the median host time of the same calls (from the call to its
return); run from a tree's root. One JSON line per process."""
import json, statistics, sys, time
sys.path.insert(0, "python")
import torch
from mamba3_jit import harness as Hn, reference as R
label, solver = sys.argv[1], sys.argv[2]
fn = Hn.load_solver(solver)
flush = torch.empty(Hn.FLUSH_BYTES, dtype=torch.uint8, device="cuda")
res = {}
for case in Hn.load_cases():
    args = R.case_args(Hn.draw(case, "cuda"))
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    lat, host = [], []
    for _ in range(30):
        flush.zero_()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        t0 = time.perf_counter_ns()
        out = fn(*args)
        host.append((time.perf_counter_ns() - t0) / 1e3)
        e.record()
        del out
        torch.cuda.synchronize()
        lat.append(s.elapsed_time(e) * 1e3)
    res[case["name"]] = [round(statistics.median(lat), 1), round(statistics.median(host), 1)]
    del args
print(json.dumps({"tree": label, "lat_host_us": res}))
