#!/usr/bin/env python3
"""Run a panel of cases against a solver and check every rule of the contract.

For each case: correctness of all 16 results against the float64 reference (SPEC section 4),
immutability of the inputs, a call on other inputs (checked as well), a repeat call on the first
inputs that must be bitwise equal to the first call, and the timing protocol of SPEC section 6
(two solver passes that must agree within 1.25x, and the eager baseline).

The last line is ``selfcheck: PASS geomean N.Nx`` (``geomean n/a`` with --no-timing) or
``selfcheck: FAIL <reasons>``. Exit status: 0 pass, 1 fail, 2 no CUDA device.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python"))

import torch  # noqa: E402

from mamba3_jit import harness as Hn  # noqa: E402
from mamba3_jit import reference as R  # noqa: E402

TIMING_STABILITY = 1.25


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(Hn.DEFAULT_CASES), help="panel JSON")
    ap.add_argument("--solver", default=str(Hn.DEFAULT_SOLVER), help="solver.py to check")
    ap.add_argument("--cases-filter", default=None, metavar="NAME",
                    help="only cases whose name contains NAME (comma-separated alternatives)")
    ap.add_argument("--no-timing", action="store_true", help="correctness checks only")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the full report here")
    # Development only: run the whole flow on the CPU, e.g. with the baseline as the solver.
    ap.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--warmup", type=int, default=Hn.WARMUP, help=argparse.SUPPRESS)
    ap.add_argument("--iters", type=int, default=Hn.ITERS, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def _fmt(x):
    return "-" if x is None else f"{x:.2e}"


def print_tensor_table(report):
    rows = []
    for name in R.RESULT_NAMES:
        e = report["tensors"][name]
        flag = "ok" if e["ok"] else "FAIL"
        mark = "*" if e["absolute"] else " "
        seq_mark = "*" if e["seq_absolute"] else " "
        rows.append(f"{name:<17} {_fmt(e['rel_l2']):>8}{mark} {_fmt(e['worst_seq_rel_l2']):>8}"
                    f"{seq_mark} {flag:<4}")
    half = (len(rows) + 1) // 2
    head = f"{'tensor':<17} {'rel_l2':>8}  {'seq_max':>8}  ok  "
    Hn.log(f"    {head} | {head}".rstrip())
    for left, right in zip(rows[:half], rows[half:] + [""]):
        Hn.log(f"    {left} | {right}".rstrip(" |"))
    if any(e["absolute"] or e["seq_absolute"] for e in report["tensors"].values()):
        Hn.log("    (* an error is absolute where the truth is exactly zero)")


def _call(solver, args, device):
    out = solver(*args)
    Hn.synchronize(device)
    return out


def check_case(case, solver, opts):
    """Returns the case's record; record["reasons"] is empty when it passes."""
    device = opts.device
    name = case["name"]
    rec = {"name": name, "seq_lens": case["seq_lens"], "seed": case["seed"],
           "T": sum(case["seq_lens"]), "S": len(case["seq_lens"]), "reasons": []}
    reasons = rec["reasons"]

    inputs = Hn.draw(case, device)
    args = R.case_args(inputs)
    before = [a.clone() for a in args]
    truth = R.reference_fwd_vjp(*args)
    Hn.synchronize(device)

    try:
        first = _call(solver, args, device)
    except Exception as e:  # the record says why, the panel goes on
        reasons.append(f"raised {_one_line(e)}")
        rec["traceback"] = traceback.format_exc()
        return rec

    mutated = Hn.mismatches(R.ARG_NAMES, args, before)
    if mutated:
        reasons.append(f"mutated inputs {','.join(mutated)}")
    rep = R.compare(first, truth, inputs["cu_seqlens"])
    rec["tensors"] = rep["tensors"]
    print_tensor_table(rep)
    if not rep["ok"]:
        bad = [n for n in R.RESULT_NAMES if not rep["tensors"][n]["ok"]]
        reasons.append(f"wrong {','.join(bad)}")
        rec["failures"] = rep["failures"]
        for f in rep["failures"]:
            Hn.log(f"    {f}")
    del truth

    # A call on other inputs, checked too, then a repeat on the first inputs: results that
    # depended on call order or on an earlier call would show up in one of the two.
    other_inputs = Hn.draw(case, device, Hn.OTHER_SEED_OFFSET)
    other = R.case_args(other_inputs)
    other_truth = R.reference_fwd_vjp(*other)
    try:
        other_rep = R.compare(_call(solver, other, device), other_truth,
                              other_inputs["cu_seqlens"])
        if not other_rep["ok"]:
            reasons.append("wrong on other inputs: " + "; ".join(other_rep["failures"][:3]))
        again = _call(solver, args, device)
    except Exception as e:
        reasons.append(f"raised on a later call {_one_line(e)}")
        rec["traceback"] = traceback.format_exc()
        return rec
    del other_truth, other, other_inputs
    differs = Hn.mismatches(R.RESULT_NAMES, first, again)
    if differs:
        reasons.append(f"repeat call not bitwise equal: {','.join(differs)}")
    del first, again
    Hn.release(device)

    if not opts.no_timing:
        kw = dict(device=device, warmup=opts.warmup, iters=opts.iters)
        try:
            s1 = Hn.time_calls(solver, args, **kw)
            base = Hn.time_calls(R.baseline_fwd_vjp, args, **kw)
            s2 = Hn.time_calls(solver, args, **kw)
        except Exception as e:
            reasons.append(f"raised while timed {_one_line(e)}")
            rec["traceback"] = traceback.format_exc()
            return rec
        m1, m2, mb = Hn.median(s1), Hn.median(s2), Hn.median(base)
        rec.update(solver_ms=m1, solver_ms_pass2=m2, baseline_ms=mb, speedup=mb / m1,
                   solver_times_ms=s1, solver_times_ms_pass2=s2, baseline_times_ms=base)
        spread = max(m1, m2) / min(m1, m2)
        rec["timing_spread"] = spread
        if not spread <= TIMING_STABILITY:
            reasons.append(f"timing unstable {m1:.3f} vs {m2:.3f} ms ({spread:.2f}x)")
    mutated = Hn.mismatches(R.ARG_NAMES, args, before)
    if mutated:
        reasons.append(f"mutated inputs during timing {','.join(mutated)}")
    Hn.release(device)
    return rec


def print_summary(records, timing):
    Hn.log("")
    if timing:
        Hn.log(f"{'case':<8} {'T':>6} {'S':>2} {'solver ms':>10} {'pass2 ms':>9} "
               f"{'baseline ms':>11} {'speedup':>8}  pass")
    else:
        Hn.log(f"{'case':<8} {'T':>6} {'S':>2}  pass")
    for r in records:
        verdict = "PASS" if not r["reasons"] else "FAIL"
        if timing and "solver_ms" in r:
            Hn.log(f"{r['name']:<8} {r['T']:>6} {r['S']:>2} {r['solver_ms']:>10.3f} "
                   f"{r['solver_ms_pass2']:>9.3f} {r['baseline_ms']:>11.3f} "
                   f"{r['speedup']:>7.2f}x  {verdict}")
        elif timing:
            Hn.log(f"{r['name']:<8} {r['T']:>6} {r['S']:>2} {'-':>10} {'-':>9} {'-':>11} "
                   f"{'-':>8}  {verdict}")
        else:
            Hn.log(f"{r['name']:<8} {r['T']:>6} {r['S']:>2}  {verdict}")


def main(argv=None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    if torch.device(opts.device).type == "cuda" and not torch.cuda.is_available():
        print("selfcheck: no CUDA device is available; the solver and its timing need one",
              flush=True)
        return 2

    cases = Hn.load_cases(opts.cases, opts.cases_filter)
    if not cases:
        Hn.log(f"selfcheck: FAIL no cases in {opts.cases} match {opts.cases_filter!r}")
        return 1
    try:
        solver = Hn.load_solver(opts.solver)
    except Exception as e:
        traceback.print_exc()
        Hn.log(f"selfcheck: FAIL cannot load solver {opts.solver}: {_one_line(e)}")
        return 1

    Hn.log(f"selfcheck: {len(cases)} case(s) from {opts.cases}, solver {opts.solver}, "
           f"device {opts.device}")
    records = []
    for i, case in enumerate(cases):
        Hn.log(f"[{i + 1}/{len(cases)}] {case['name']} seq_lens={case['seq_lens']} "
               f"seed={case['seed']}")
        rec = check_case(case, solver, opts)
        records.append(rec)
        if "traceback" in rec:
            Hn.log(rec["traceback"].rstrip())
        verdict = "PASS" if not rec["reasons"] else "FAIL " + "; ".join(rec["reasons"])
        timing = (f" solver {rec['solver_ms']:.3f}/{rec['solver_ms_pass2']:.3f} ms, baseline "
                  f"{rec['baseline_ms']:.3f} ms, {rec['speedup']:.2f}x" if "speedup" in rec else "")
        Hn.log(f"    -> {verdict}{timing}")

    timing = not opts.no_timing
    print_summary(records, timing)
    failed = [r for r in records if r["reasons"]]
    gm = Hn.geomean(r["speedup"] for r in records) if timing and not failed else None
    summary = {"pass": not failed, "geomean_speedup": gm, "device": opts.device,
               "solver": str(opts.solver), "cases_file": str(opts.cases)}
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"summary": summary, "cases": records}, f, indent=1, default=str)

    if failed:
        why = "; ".join(f"{r['name']}: {', '.join(r['reasons'])}" for r in failed)
        Hn.log(f"selfcheck: FAIL {why}")
        return 1
    Hn.log(f"selfcheck: PASS geomean {gm:.1f}x" if timing else "selfcheck: PASS geomean n/a")
    return 0


if __name__ == "__main__":
    sys.exit(main())
