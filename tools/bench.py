#!/usr/bin/env python3
"""Benchmark a solver on a panel: latency, per-kernel GPU time, host overhead, achieved
throughput against a roofline floor, and speedup over the eager baseline.

Latency follows the timing protocol of SPEC section 6 (L2 flushed by a 256 MB write and the
device synchronised before each call, CUDA events around the call alone, median of 20 after 3
warm-up calls). Kernel times come from torch.profiler over a few further flushed calls; host
overhead is latency minus the summed kernel time of one call (it includes launch gaps).

The floor model
---------------
Bytes (compulsory traffic): every input read once and every output written once, at their
contract dtypes. Nothing else (no intermediate state, no re-reads) is counted, so no correct
implementation can move fewer bytes.

FLOPs: the matmuls of a chunked algorithm (chunk C = 64) as derived in the chunked form of
VJP.md, per value head and per chunk of Lc <= C tokens, counting 2*m*n*k per (m x k)(k x n)
product and nothing elementwise (rotations, gates, exps, cumsums):

  forward                                   backward
  scores   qr ks^T      2 Lc Lc N           dM       dy v^T          2 Lc Lc P
  intra    M v          2 Lc Lc P           dqr      (dM*W) ks       2 Lc Lc N
  inter    qr S^T       2 Lc N P            dks      (dM*W)^T qr     2 Lc Lc N
  state    v^T ks       2 Lc P N            dv       M^T dy          2 Lc Lc P
                                            dks     v dS             2 Lc P N
                                            dv      ks dS^T          2 Lc N P
                                            dqr     dy S             2 Lc P N
                                            dS      dy^T qr          2 Lc P N

  total per chunk and head = 6 Lc^2 (N + P) + 12 Lc N P

The forward's quantities are assumed kept for the backward (no recomputation of scores or of
the chunk-entry states), so this too is a lower bound for a chunked implementation.

floor = max(FLOPs / peak FLOP/s, bytes / peak bandwidth). The default peaks are roughly those
measured on an H200 (dense bf16 matmul, device-to-device copy); pass --peak-tflops and
--peak-gbps for another GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

from mamba3_jit import harness as Hn  # noqa: E402
from mamba3_jit import reference as R  # noqa: E402

CHUNK = 64
PEAK_TFLOPS = 790.0
PEAK_GBPS = 4300.0
PROFILE_ITERS = 5


def model_flops(seq_lens, H=R.FAMILY["H"], N=R.FAMILY["N"], P=R.FAMILY["P"], chunk=CHUNK) -> int:
    total = 0
    for L in seq_lens:
        full, rest = divmod(int(L), chunk)
        for Lc, count in ((chunk, full), (rest, 1 if rest else 0)):
            total += count * (6 * Lc * Lc * (N + P) + 12 * Lc * N * P)
    return total * H


def model_bytes(args, results) -> int:
    """Compulsory traffic: each input read once plus each output written once."""
    return sum(t.numel() * t.element_size() for t in list(args) + list(results))


def floor_seconds(flops, nbytes, peak_tflops=PEAK_TFLOPS, peak_gbps=PEAK_GBPS) -> float:
    return max(flops / (peak_tflops * 1e12), nbytes / (peak_gbps * 1e9))


def _kernel_events(prof):
    """(name, microseconds) of every GPU activity (kernels, memsets, copies) in a profile."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out.append((e.name, e.time_range.elapsed_us()))
    return out


def profile_kernels(fn, args, device, iters=PROFILE_ITERS, flush_bytes=Hn.FLUSH_BYTES):
    """Per-kernel GPU time of one call, averaged over ``iters`` flushed calls.

    The flush runs inside the profile (so that the kernels see a cold L2, as when timed); its own
    GPU activity is learnt from a profile of the flush alone and the longest ``iters``
    occurrences of it are removed, which leaves any short memset of the solver in place.
    """
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(flush_bytes, dtype=torch.uint8, device=device)
    fn(*args)
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush.zero_()
        torch.cuda.synchronize(device)
    flush_events = _kernel_events(prof)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush.zero_()
            torch.cuda.synchronize(device)
            out = fn(*args)
            del out
        torch.cuda.synchronize(device)
    events = _kernel_events(prof)
    for fname in {n for n, _ in flush_events}:
        per_flush = sum(1 for n, _ in flush_events if n == fname)
        hits = set(sorted((i for i, (n, _) in enumerate(events) if n == fname),
                          key=lambda i: -events[i][1])[: per_flush * iters])
        events = [e for i, e in enumerate(events) if i not in hits]
    per_kernel = defaultdict(lambda: [0, 0.0])
    for name, us in events:
        per_kernel[name][0] += 1
        per_kernel[name][1] += us
    del flush
    return {name: {"calls_per_iter": n / iters, "us_per_iter": us / iters}
            for name, (n, us) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])}


def bench_case(case, solver, opts):
    device = opts.device
    inputs = Hn.draw(case, device)
    args = R.case_args(inputs)
    results = solver(*args)
    Hn.synchronize(device)
    flops = model_flops(case["seq_lens"])
    nbytes = model_bytes(args, results)
    del results
    kw = dict(device=device, warmup=opts.warmup, iters=opts.iters)
    lat = Hn.median(Hn.time_calls(solver, args, **kw))
    rec = {"name": case["name"], "seq_lens": case["seq_lens"], "T": sum(case["seq_lens"]),
           "latency_ms": lat, "model_flops": flops, "model_bytes": nbytes,
           "floor_us": floor_seconds(flops, nbytes, opts.peak_tflops, opts.peak_gbps) * 1e6}
    rec["tflops"] = flops / (lat * 1e-3) / 1e12
    rec["gbps"] = nbytes / (lat * 1e-3) / 1e9
    rec["floor_fraction"] = rec["floor_us"] / (lat * 1e3)
    if not opts.no_baseline:
        rec["baseline_ms"] = Hn.median(Hn.time_calls(R.baseline_fwd_vjp, args, **kw))
        rec["speedup"] = rec["baseline_ms"] / lat
    if torch.device(device).type == "cuda" and not opts.no_profile:
        kernels = profile_kernels(solver, args, device)
        rec["kernels"] = kernels
        rec["kernel_ms"] = sum(k["us_per_iter"] for k in kernels.values()) / 1e3
        rec["host_overhead_ms"] = lat - rec["kernel_ms"]
    Hn.release(device)
    return rec


def print_case(rec):
    for name, k in (rec.get("kernels") or {}).items():
        short = name if len(name) <= 70 else name[:67] + "..."
        Hn.log(f"    {k['us_per_iter']:>9.1f} us  x{k['calls_per_iter']:<5g} {short}")


def print_table(records):
    Hn.log("")
    Hn.log(f"{'case':<8} {'T':>6} {'lat ms':>8} {'kern ms':>8} {'host ms':>8} {'floor us':>9} "
           f"{'%floor':>7} {'TFLOP/s':>8} {'GB/s':>7} {'base ms':>8} {'speedup':>8}")

    def f(x, spec):
        return format(x, spec) if x is not None else "-"

    for r in records:
        Hn.log(f"{r['name']:<8} {r['T']:>6} {r['latency_ms']:>8.3f} "
               f"{f(r.get('kernel_ms'), '>8.3f'):>8} {f(r.get('host_overhead_ms'), '>8.3f'):>8} "
               f"{r['floor_us']:>9.1f} {100 * r['floor_fraction']:>6.1f}% {r['tflops']:>8.2f} "
               f"{r['gbps']:>7.0f} {f(r.get('baseline_ms'), '>8.3f'):>8} "
               f"{f(r.get('speedup'), '>7.2f'):>7}x")
    speedups = [r["speedup"] for r in records if "speedup" in r]
    if speedups:
        Hn.log(f"geomean speedup {Hn.geomean(speedups):.2f}x over {len(speedups)} case(s)")


def plot(records, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        Hn.log(f"bench: matplotlib is not importable; no plot written to {path}")
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [r["name"] for r in records]
    if any("speedup" in r for r in records):
        ax1.bar(names, [r.get("speedup", 0.0) for r in records], color="tab:blue")
        ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.set_title("speedup over the eager baseline")
    ax1.set_ylabel("x")
    order = sorted(records, key=lambda r: r["T"])
    Ts = [r["T"] for r in order]
    ax2.plot(Ts, [r["latency_ms"] for r in order], "o-", label="solver")
    if all("baseline_ms" in r for r in order):
        ax2.plot(Ts, [r["baseline_ms"] for r in order], "s-", label="baseline")
    ax2.plot(Ts, [r["floor_us"] / 1e3 for r in order], "--", label="floor model")
    ax2.set_xlabel("T (tokens)")
    ax2.set_ylabel("ms")
    ax2.set_yscale("log")
    ax2.set_title("time vs T")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    Hn.log(f"bench: plot written to {path}")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(Hn.DEFAULT_CASES), help="panel JSON")
    ap.add_argument("--solver", default=str(Hn.DEFAULT_SOLVER), help="solver.py to time")
    ap.add_argument("--cases-filter", default=None, metavar="NAME")
    ap.add_argument("--json", default=None, metavar="OUT")
    ap.add_argument("--png", default=None, metavar="OUT")
    ap.add_argument("--no-baseline", action="store_true", help="skip timing the eager baseline")
    ap.add_argument("--no-profile", action="store_true", help="skip the per-kernel profile")
    ap.add_argument("--warmup", type=int, default=Hn.WARMUP)
    ap.add_argument("--iters", type=int, default=Hn.ITERS)
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS)
    ap.add_argument("--peak-gbps", type=float, default=PEAK_GBPS)
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if torch.device(opts.device).type == "cuda" and not torch.cuda.is_available():
        print("bench: no CUDA device is available", flush=True)
        return 2
    cases = Hn.load_cases(opts.cases, opts.cases_filter)
    if not cases:
        Hn.log(f"bench: no cases in {opts.cases} match {opts.cases_filter!r}")
        return 1
    solver = Hn.load_solver(opts.solver)
    records = []
    for i, case in enumerate(cases):
        Hn.log(f"[{i + 1}/{len(cases)}] {case['name']} T={sum(case['seq_lens'])}")
        rec = bench_case(case, solver, opts)
        print_case(rec)
        records.append(rec)
    print_table(records)
    if opts.json:
        meta = {"chunk": CHUNK, "peak_tflops": opts.peak_tflops, "peak_gbps": opts.peak_gbps,
                "solver": str(opts.solver), "device": opts.device,
                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
        with open(opts.json, "w") as f:
            json.dump({"meta": meta, "cases": records}, f, indent=1)
    if opts.png:
        plot(records, opts.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
