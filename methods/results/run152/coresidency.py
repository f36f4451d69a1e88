"""Do a forward job and a backward job share an SM better than two of the same kind?

Two calls of the solver on c01's inputs, on two streams: call B starts d us after call A (a
sleep kernel on B's stream first). With d = 0 the two calls' forwards run side by side, then
their backwards; with d near A's forward (about 215 us) B's forward runs beside A's backward, the
two kinds sharing SMs (one CTA of each fits an SM: 110 + 114 KB of shared memory, 128 registers
each). The same work either way: if mixed pairs contend less than same-kind ones (run 151: a
paired job takes 1.4 to 1.5 times a lone one), the total falls as d moves to the mixed overlap.
Timing: events around both calls after a sync and an L2 flush, medians of 10; the sleep's clock
rate calibrated first. Writes JSON to argv[2].

    python3 methods/results/run152/coresidency.py methods/versions/v234/solver.py OUT.json
"""
import json
import statistics
import sys

sys.path.insert(0, "python")
import torch  # noqa: E402
from mamba3_jit import harness as Hn, reference as R  # noqa: E402

fn = Hn.load_solver(sys.argv[1])
case = Hn.load_cases(name_filter="c01")[0]
args_a = R.case_args(Hn.draw(case, "cuda"))
args_b = R.case_args(Hn.draw(case, "cuda", seed_offset=Hn.OTHER_SEED_OFFSET))
flush = torch.empty(Hn.FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
for _ in range(3):
    fn(*args_a), fn(*args_b)
torch.cuda.synchronize()

# Cycles a microsecond for torch.cuda._sleep.
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
e0.record()
torch.cuda._sleep(10_000_000)
e1.record()
torch.cuda.synchronize()
cycles_per_us = 10_000_000 / (e0.elapsed_time(e1) * 1e3)


def once(mode, d_us):
    flush.zero_()
    torch.cuda.synchronize()
    start, end_a, end_b = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    start.record(s1)
    s2.wait_event(start)
    with torch.cuda.stream(s1):
        fn(*args_a)
        if mode == "sequential":
            fn(*args_b)
    end_a.record(s1)
    if mode == "concurrent":
        with torch.cuda.stream(s2):
            if d_us > 0:
                torch.cuda._sleep(int(d_us * cycles_per_us))
            fn(*args_b)
        end_b.record(s2)
        s1.wait_event(end_b)
    final = torch.cuda.Event(enable_timing=True)
    final.record(s1)
    torch.cuda.synchronize()
    return start.elapsed_time(final) * 1e3, start.elapsed_time(end_a) * 1e3


out = {"cycles_per_us": cycles_per_us, "runs": {}}
plans = [("single", 0), ("sequential", 0)] + [("concurrent", d) for d in (0, 100, 200, 300, 400, 600, 900)]
for mode, d in plans:
    if mode == "single":
        samples = []
        for _ in range(10):
            flush.zero_()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(*args_a)
            b.record()
            torch.cuda.synchronize()
            samples.append((a.elapsed_time(b) * 1e3, 0.0))
    else:
        samples = [once(mode, d) for _ in range(10)]
    total = statistics.median(s[0] for s in samples)
    first = statistics.median(s[1] for s in samples)
    key = f"{mode}_{d}"
    out["runs"][key] = {"total_us": total, "call_a_us": first}
    print(f"{key:16s} total {total:8.1f} us  call A {first:8.1f} us", flush=True)
json.dump(out, open(sys.argv[2], "w"), indent=1)
