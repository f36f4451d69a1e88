#!/usr/bin/env python3
"""Benchmark a solver on a panel: latency, per-kernel GPU time, host overhead, achieved
throughput against a roofline floor, and speedup over the eager baseline.

Latency follows the timing protocol of SPEC section 6 (L2 flushed by a 256 MB write and the
device synchronised before each call, CUDA events around the call alone, median of 20 after 3
warm-up calls). Kernel times come from torch.profiler over a few further flushed calls; host
overhead is latency minus the GPU's busy span in one call (the union of its kernels' intervals:
kernels that overlap count once; it includes launch gaps).

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

Several solvers side by side
----------------------------
Give --solver more than once (e.g. a version snapshot and the current solver) to compare them in
one run. Machine noise drifts over minutes, so timing one solver's whole panel and then the
other's would fold that drift into the comparison. Instead, per case, the inputs are drawn once,
every solver is warmed up, and the timing passes alternate between the solvers (--reps rounds,
2 by default); each solver's latency is the median of all its timed calls. The eager baseline is
timed once per case after the passes, so every solver's speedup has the same denominator and the
ratio of two speedups is the ratio of their latencies. Rows are labelled by the solver's
directory name (v1, v2, main), made unique where two solvers share one.
"""

from __future__ import annotations

import argparse
import json
import os
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
    """(name, microseconds, start, end) of every GPU activity (kernels, memsets, copies) in a
    profile, in the order the profiler lists them; start and end in the profiler's microseconds."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            out.append((e.name, e.time_range.elapsed_us(), e.time_range.start, e.time_range.end))
    return out


def _busy_us(intervals) -> float:
    """Length of the union of (start, end) intervals: the time the GPU ran anything."""
    busy, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            busy += end - start
            reach = end
        elif end > reach:
            busy += end - reach
            reach = end
    return busy


def profile_kernels(fn, args, device, iters=PROFILE_ITERS, flush_bytes=Hn.FLUSH_BYTES):
    """Per-kernel GPU time of one call, averaged over ``iters`` flushed calls, and the GPU's busy
    span per call.

    The flush runs inside the profile (so that the kernels see a cold L2, as when timed); its own
    GPU activity is learnt from a profile of the flush alone and the longest ``iters``
    occurrences of it are removed, which leaves any short memset of the solver in place. Kernels
    of one call may overlap (a kernel launched programmatically runs beside its predecessor's
    tail), so the span, not the sum of the kernel times, is what the call's latency contains;
    each kernel's median start and end within its call (from the call's first activity) show
    where they overlap.
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
    flush_hits = set()
    for fname in {e[0] for e in flush_events}:
        per_flush = sum(1 for e in flush_events if e[0] == fname)
        flush_hits |= set(sorted((i for i, e in enumerate(events) if e[0] == fname),
                                 key=lambda i: -events[i][1])[: per_flush * iters])
    # The flushes' starts cut the timeline into calls (each call runs after its flush).
    cuts = sorted(events[i][2] for i in flush_hits)
    events = [e for i, e in enumerate(events) if i not in flush_hits]
    calls = defaultdict(list)
    for e in events:
        calls[sum(1 for c in cuts if c <= e[2])].append(e)
    spans, starts, ends = [], defaultdict(list), defaultdict(list)
    for call in calls.values():
        t0 = min(e[2] for e in call)
        spans.append(_busy_us([(e[2], e[3]) for e in call]))
        for name in {e[0] for e in call}:
            starts[name].append(min(e[2] for e in call if e[0] == name) - t0)
            ends[name].append(max(e[3] for e in call if e[0] == name) - t0)
    per_kernel = defaultdict(lambda: [0, 0.0])
    for name, us, _, _ in events:
        per_kernel[name][0] += 1
        per_kernel[name][1] += us
    del flush
    kernels = {name: {"calls_per_iter": n / iters, "us_per_iter": us / iters,
                      "start_us": Hn.median(starts[name]), "end_us": Hn.median(ends[name])}
               for name, (n, us) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])}
    return kernels, (sum(spans) / iters if spans else 0.0)


def solver_labels(paths) -> list:
    """One label per solver path: its directory name, else directory/stem, else a #n suffix."""
    paths = [Path(p).resolve() for p in paths]
    labels = [p.parent.name or p.stem for p in paths]
    if len(set(labels)) < len(labels):
        labels = [f"{p.parent.name}/{p.stem}" if labels.count(lab) > 1 else lab
                  for p, lab in zip(paths, labels)]
    seen = defaultdict(int)
    out = []
    for lab in labels:
        seen[lab] += 1
        out.append(lab if labels.count(lab) == 1 else f"{lab}#{seen[lab]}")
    return out


def _warm_up(fn, args, device, n):
    for _ in range(n):
        out = fn(*args)
        del out
    Hn.synchronize(device)


def bench_case(case, solvers, opts):
    """Times every (label, fn) of ``solvers`` on one case.

    Returns the case's shared fields (sizes, floor, baseline) and one record per solver label.
    """
    device = opts.device
    inputs = Hn.draw(case, device)
    args = R.case_args(inputs)
    results = solvers[0][1](*args)
    Hn.synchronize(device)
    flops = model_flops(case["seq_lens"])
    nbytes = model_bytes(args, results)
    del results
    common = {"name": case["name"], "seq_lens": case["seq_lens"], "T": sum(case["seq_lens"]),
              "model_flops": flops, "model_bytes": nbytes,
              "floor_us": floor_seconds(flops, nbytes, opts.peak_tflops, opts.peak_gbps) * 1e6}

    for _, fn in solvers:
        _warm_up(fn, args, device, opts.warmup)
    # With a single solver nothing runs between its warm-up and its pass; with several, one
    # untimed call per pass lets each solver find its own state again after the others ran.
    rewarm = 1 if len(solvers) > 1 else 0
    passes = {label: [] for label, _ in solvers}
    for _ in range(opts.reps):
        for label, fn in solvers:
            passes[label].append(Hn.time_calls(fn, args, device=device, warmup=rewarm,
                                               iters=opts.iters))

    if not opts.no_baseline:
        common["baseline_ms"] = Hn.median(Hn.time_calls(
            R.baseline_fwd_vjp, args, device=device, warmup=opts.warmup, iters=opts.iters))

    per_solver = {}
    for label, fn in solvers:
        times = [t for p in passes[label] for t in p]
        lat = Hn.median(times)
        rec = {"latency_ms": lat, "pass_ms": [Hn.median(p) for p in passes[label]],
               "times_ms": passes[label]}
        rec["tflops"] = flops / (lat * 1e-3) / 1e12
        rec["gbps"] = nbytes / (lat * 1e-3) / 1e9
        rec["floor_fraction"] = common["floor_us"] / (lat * 1e3)
        if "baseline_ms" in common:
            rec["speedup"] = common["baseline_ms"] / lat
        if torch.device(device).type == "cuda" and not opts.no_profile:
            kernels, span_us = profile_kernels(fn, args, device)
            rec["kernels"] = kernels
            rec["kernel_sum_ms"] = sum(k["us_per_iter"] for k in kernels.values()) / 1e3
            rec["kernel_ms"] = span_us / 1e3  # the GPU's busy span: overlapping kernels count once
            rec["host_overhead_ms"] = lat - rec["kernel_ms"]
        per_solver[label] = rec
    Hn.release(device)
    return common, per_solver


def single_record(common, per_solver) -> dict:
    """The flat record of a one-solver run, as written before several solvers were possible."""
    (rec,) = per_solver.values()
    out = dict(common)
    out.update(rec)
    return out


def print_kernels(rec, indent="    "):
    for name, k in (rec.get("kernels") or {}).items():
        short = name if len(name) <= 70 else name[:67] + "..."
        where = (f"  [{k['start_us']:>7.1f} .. {k['end_us']:>7.1f} us]"
                 if k.get("start_us") is not None else "")
        Hn.log(f"{indent}{k['us_per_iter']:>9.1f} us  x{k['calls_per_iter']:<5g} {short}{where}")


def _f(x, spec):
    return format(x, spec) if x is not None else "-"


def print_table(records):
    Hn.log("")
    Hn.log(f"{'case':<8} {'T':>6} {'lat ms':>8} {'kern ms':>8} {'host ms':>8} {'floor us':>9} "
           f"{'%floor':>7} {'TFLOP/s':>8} {'GB/s':>7} {'base ms':>8} {'speedup':>8}")
    for r in records:
        Hn.log(f"{r['name']:<8} {r['T']:>6} {r['latency_ms']:>8.3f} "
               f"{_f(r.get('kernel_ms'), '>8.3f'):>8} {_f(r.get('host_overhead_ms'), '>8.3f'):>8} "
               f"{r['floor_us']:>9.1f} {100 * r['floor_fraction']:>6.1f}% {r['tflops']:>8.2f} "
               f"{r['gbps']:>7.0f} {_f(r.get('baseline_ms'), '>8.3f'):>8} "
               f"{_f(r.get('speedup'), '>7.2f'):>7}x")
    speedups = [r["speedup"] for r in records if "speedup" in r]
    if speedups:
        Hn.log(f"geomean speedup {Hn.geomean(speedups):.2f}x over {len(speedups)} case(s)")


def print_case_table(common, per_solver):
    """One row per solver; ``vs first`` is the first solver's latency over this one's."""
    width = max(8, *(len(lab) for lab in per_solver))
    Hn.log(f"    {'solver':<{width}} {'lat ms':>8} {'passes ms':>17} {'kern ms':>8} "
           f"{'host ms':>8} {'%floor':>7} {'TFLOP/s':>8} {'GB/s':>7} {'speedup':>8} "
           f"{'vs first':>8}")
    first = next(iter(per_solver.values()))["latency_ms"]
    for label, r in per_solver.items():
        passes = "/".join(f"{p:.3f}" for p in r["pass_ms"])
        Hn.log(f"    {label:<{width}} {r['latency_ms']:>8.3f} {passes:>17} "
               f"{_f(r.get('kernel_ms'), '>8.3f'):>8} {_f(r.get('host_overhead_ms'), '>8.3f'):>8} "
               f"{100 * r['floor_fraction']:>6.1f}% {r['tflops']:>8.2f} {r['gbps']:>7.0f} "
               f"{_f(r.get('speedup'), '>7.2f'):>7}x {first / r['latency_ms']:>7.2f}x")
    if "baseline_ms" in common:
        Hn.log(f"    {'baseline':<{width}} {common['baseline_ms']:>8.3f}   "
               f"(floor {common['floor_us']:.1f} us)")


def geomeans(records, labels) -> dict:
    out = {}
    for label in labels:
        speedups = [r["solvers"][label]["speedup"] for r in records
                    if "speedup" in r["solvers"][label]]
        out[label] = {"geomean_speedup": Hn.geomean(speedups) if speedups else None,
                      "cases": len(speedups)}
    return out


def print_summary(records, labels, summary):
    width = max(8, *(len(lab) for lab in labels))
    head = f"{'case':<8} {'T':>6} {'base ms':>8}"
    head += "".join(f" {lab + ' ms':>{width + 3}} {'x':>7}" for lab in labels)
    Hn.log("")
    Hn.log(head)
    for r in records:
        line = f"{r['name']:<8} {r['T']:>6} {_f(r.get('baseline_ms'), '>8.3f'):>8}"
        for lab in labels:
            s = r["solvers"][lab]
            line += f" {s['latency_ms']:>{width + 3}.3f} {_f(s.get('speedup'), '>6.2f'):>6}x"
        Hn.log(line)
    if any(summary[lab]["geomean_speedup"] is not None for lab in labels):
        line = f"{'geomean':<8} {'':>6} {'':>8}"
        for lab in labels:
            line += f" {'':>{width + 3}} {_f(summary[lab]['geomean_speedup'], '>6.2f'):>6}x"
        Hn.log(line)
        for lab in labels:
            g = summary[lab]["geomean_speedup"]
            if g is not None:
                Hn.log(f"geomean speedup {g:.2f}x over {summary[lab]['cases']} case(s): {lab}")


def plot(records, path, labels=None):
    """``records`` are flat one-solver records, or multi-solver ones when ``labels`` is given."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        Hn.log(f"bench: matplotlib is not importable; no plot written to {path}")
        return
    if labels is None:
        labels = ["solver"]
        records = [dict(r, solvers={"solver": r}) for r in records]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [r["name"] for r in records]
    width = 0.8 / len(labels)
    xs = range(len(names))
    if any("speedup" in r["solvers"][lab] for r in records for lab in labels):
        for i, lab in enumerate(labels):
            ax1.bar([x + (i - (len(labels) - 1) / 2) * width for x in xs],
                    [r["solvers"][lab].get("speedup", 0.0) for r in records], width, label=lab)
        ax1.axhline(1.0, color="grey", lw=0.8)
        if len(labels) > 1:
            ax1.legend()
    ax1.set_xticks(list(xs), names)
    ax1.set_title("speedup over the eager baseline")
    ax1.set_ylabel("x")
    order = sorted(records, key=lambda r: r["T"])
    Ts = [r["T"] for r in order]
    for lab in labels:
        ax2.plot(Ts, [r["solvers"][lab]["latency_ms"] for r in order], "o-", label=lab)
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
    ap.add_argument("--solver", action="append", default=None, metavar="SOLVER_PY",
                    help="solver.py to time; repeat to time several side by side, the first "
                         f"being the reference of 'vs first' (default {Hn.DEFAULT_SOLVER})")
    ap.add_argument("--cases-filter", default=None, metavar="NAME")
    ap.add_argument("--json", default=None, metavar="OUT")
    ap.add_argument("--png", default=None, metavar="OUT")
    ap.add_argument("--no-baseline", action="store_true", help="skip timing the eager baseline")
    ap.add_argument("--no-profile", action="store_true", help="skip the per-kernel profile")
    ap.add_argument("--warmup", type=int, default=Hn.WARMUP)
    ap.add_argument("--iters", type=int, default=Hn.ITERS, help="timed calls per pass")
    ap.add_argument("--reps", type=int, default=None,
                    help="timing passes per solver and case, interleaved across solvers "
                         "(default 1 with one solver, 2 with several)")
    ap.add_argument("--peak-tflops", type=float, default=PEAK_TFLOPS)
    ap.add_argument("--peak-gbps", type=float, default=PEAK_GBPS)
    ap.add_argument("--pin-cpu", type=int, default=None, metavar="CORE",
                    help="run this process on one CPU core, so that the host part of a call varies "
                         "less from process to process (c00's latency medians over five or six "
                         "processes: pinned within 12 us, unpinned 19 us on one machine, run 120; "
                         "pinned within 3 us on another, run 121)")
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    if opts.pin_cpu is not None:
        allowed = sorted(os.sched_getaffinity(0))
        if opts.pin_cpu not in allowed:
            ap.error(f"--pin-cpu: core {opts.pin_cpu} is not one this process may run on "
                     f"(allowed: {allowed[0]} to {allowed[-1]}, {len(allowed)} cores)")
    if not opts.solver:
        opts.solver = [str(Hn.DEFAULT_SOLVER)]
    if opts.reps is None:
        opts.reps = 1 if len(opts.solver) == 1 else 2
    if opts.reps < 1 or opts.iters < 1:
        ap.error("--reps and --iters must be at least 1")
    return opts


def main(argv=None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if opts.pin_cpu is not None:
        os.sched_setaffinity(0, {opts.pin_cpu})
        Hn.log(f"bench: pinned to CPU core {opts.pin_cpu}")
    if torch.device(opts.device).type == "cuda" and not torch.cuda.is_available():
        print("bench: no CUDA device is available", flush=True)
        return 2
    cases = Hn.load_cases(opts.cases, opts.cases_filter)
    if not cases:
        Hn.log(f"bench: no cases in {opts.cases} match {opts.cases_filter!r}")
        return 1
    labels = solver_labels(opts.solver)
    solvers = [(lab, Hn.load_solver(p)) for lab, p in zip(labels, opts.solver)]
    single = len(solvers) == 1
    if not single:
        Hn.log("bench: " + ", ".join(f"{lab} = {p}" for lab, p in zip(labels, opts.solver)))
    records = []
    for i, case in enumerate(cases):
        Hn.log(f"[{i + 1}/{len(cases)}] {case['name']} T={sum(case['seq_lens'])}")
        common, per_solver = bench_case(case, solvers, opts)
        if single:
            rec = single_record(common, per_solver)
            print_kernels(rec)
        else:
            rec = dict(common, solvers=per_solver)
            for lab, r in per_solver.items():
                if r.get("kernels"):
                    Hn.log(f"  {lab}:")
                    print_kernels(r)
            print_case_table(common, per_solver)
        records.append(rec)
    summary = None
    if single:
        print_table(records)
    else:
        summary = geomeans(records, labels)
        print_summary(records, labels, summary)
    if opts.json:
        meta = {"chunk": CHUNK, "peak_tflops": opts.peak_tflops, "peak_gbps": opts.peak_gbps, "pinned_cpu": opts.pin_cpu,
                "device": opts.device, "warmup": opts.warmup, "iters": opts.iters,
                "reps": opts.reps,
                "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
        if single:
            meta["solver"] = str(opts.solver[0])
            doc = {"meta": meta, "cases": records}
        else:
            meta["solvers"] = {lab: str(p) for lab, p in zip(labels, opts.solver)}
            doc = {"meta": meta, "solvers": labels, "cases": records, "summary": summary}
        with open(opts.json, "w") as f:
            json.dump(doc, f, indent=1)
    if opts.png:
        plot(records, opts.png, None if single else labels)
    return 0


if __name__ == "__main__":
    sys.exit(main())
