"""Which tensor-core operand formats keep every result inside the error budget?

The chunked float64 reference runs with its four tile products, and the eight products autograd
derives from them for the backward, replaced by products whose operands are first rounded to a
tensor-core format: tf32 (11 significant bits), bf16 (8), fp16 (11, with half's exponent range), fp16s
(fp16 with a power-of-two scale per tile), or a split format where each operand is
hi + lo in that format and the product is hi*hi + hi*lo + lo*hi (about twice the bits). Everything
else stays float64, so the errors measured are those of the operand formats alone; the results
are then cast to the contract's dtypes (bf16 outputs round as the kernel's do) and compared with
the float64 truth, per tensor, with SPEC's rel-L2.

The chunk is the kernel's (32 tokens by default). Runs on the CPU:
    python3 methods/precision_study.py [--cases c00,c06] [--formats tf32,bf16,bf16x3] [--chunk 32]
        [--long 4096] [--json OUT] [--ranges] [--input-scale 1024]
A format may also be mix=F/F/F/F, one per product site: scores (qr ks^T), intra (M v), state
(the chunk's state contribution) and inter (qr S^T), each with its two backward products. A site's
F may be three formats F|G|H: its forward product a @ b, then the backward's g @ b^T and a^T @ g.
bf16x2a and bf16x2b split only the left or only the right operand (hi*hi + lo*hi, or hi*hi +
hi*lo): the cost of two bf16 products where the other operand is rounded once.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
from mamba3_jit import harness as Hn  # noqa: E402
from mamba3_jit import reference as R  # noqa: E402

SIGNIFICANT_BITS = {"tf32": 11, "bf16": 8, "tf32rz": 11}


def round_to(x: torch.Tensor, bits: int, toward_zero: bool = False) -> torch.Tensor:
    """x rounded to `bits` significant bits (round to nearest even, or toward zero: what a tensor
    core does with fp32 bits it is handed unrounded); range is not limited, as tf32 and bf16 share
    fp32's exponent range."""
    m, e = torch.frexp(x)
    scaled = m * 2.0 ** bits
    return torch.ldexp((torch.trunc(scaled) if toward_zero else torch.round(scaled)) / 2.0 ** bits, e)


def operand_product(fmt: str):
    """a @ b as a tensor core computes it in `fmt`, accumulated exactly (float64)."""
    if fmt == "fp64":
        return torch.matmul
    split = fmt[-2:] if fmt[-2:] in ("x3", "2a", "2b") else ""
    base = fmt[:-2] if split == "x3" else fmt[:-3] if split else fmt
    if base == "fp16":
        # IEEE half: 11 significant bits like tf32, but 5 exponent bits (overflow to inf above
        # 65504, gradual underflow below 6.1e-5), as ldmatrix-fed m16n8k16.f16 would see it.
        def rnd(x):
            return x.to(torch.float16).to(x.dtype)
    elif base == "fp16s":
        # Half with a power-of-two scale per tile (the last two dimensions: one chunk's operand),
        # chosen so that the tile's largest element lands in [2^14, 2^15): the guard a kernel on
        # half planes would apply at staging. Exact scaling, so only the rounding to half remains.
        def rnd(x):
            amax = x.abs().amax(dim=(-2, -1), keepdim=True)
            e = torch.where(amax > 0, torch.floor(torch.log2(amax)), torch.zeros_like(amax))
            scale = torch.exp2(14 - e)
            return (x * scale).to(torch.float16).to(x.dtype) / scale
    else:
        bits, rz = SIGNIFICANT_BITS[base], base.endswith("rz")

        def rnd(x):
            return round_to(x, bits, rz)
    if not split:
        return lambda a, b: rnd(a) @ rnd(b)

    def product(a, b):
        ah, bh = rnd(a), rnd(b)
        al, bl = rnd(a - ah), rnd(b - bh)
        if split == "2a":
            return ah @ bh + al @ bh
        if split == "2b":
            return ah @ bh + ah @ bl
        return ah @ bh + (ah @ bl + al @ bh)
    return product


def rounded_matmul(fmt: str):
    """A differentiable matmul whose forward and both backward products use `fmt` operands, or,
    for "F|G|H", F forward, G for g @ b^T and H for a^T @ g."""
    parts = fmt.split("|")
    if len(parts) not in (1, 3):
        raise ValueError(f"{fmt}: one format, or three joined by |")
    mm, mm_ga, mm_gb = (operand_product(f) for f in (parts * 3 if len(parts) == 1 else parts))

    class RoundedMatmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return mm(a, b)

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            return mm_ga(g, b.transpose(-1, -2)), mm_gb(a.transpose(-1, -2), g)

    return RoundedMatmul.apply


# The chunked reference calls its tile products in this order, once per sequence.
SITES = ("scores", "intra", "state", "inter")


def by_site(per_site):
    """A matmul that hands the reference's calls to per_site[0..3] in the order of SITES, cycling."""
    calls = [0]

    def product(a, b):
        mm = per_site[calls[0] % len(SITES)]
        calls[0] += 1
        return mm(a, b)
    return product


def site_matmul(fmt: str):
    """One format for every product, or "mix=F/F/F/F": one per site of SITES (each site's two
    backward products use its format too)."""
    if not fmt.startswith("mix="):
        return rounded_matmul(fmt)
    per_site = [rounded_matmul(f) for f in fmt[4:].split("/")]
    if len(per_site) != len(SITES):
        raise ValueError(f"{fmt}: expected one format for each of {SITES}")
    return by_site(per_site)


def operand_ranges(case, chunk: int, ranges: dict) -> None:
    """The largest |operand| each site's products see (forward a and b, the backward's incoming
    gradient g), folded into `ranges`: how far from half's 65504 the fp16 format runs."""
    def site(name):
        def note(role, x):
            ranges[(name, role)] = max(ranges.get((name, role), 0.0), x.abs().max().item())

        class Watched(torch.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                ctx.save_for_backward(a, b)
                note("a", a)
                note("b", b)
                return a @ b

            @staticmethod
            def backward(ctx, g):
                a, b = ctx.saved_tensors
                note("g", g)
                return g @ b.transpose(-1, -2), a.transpose(-1, -2) @ g
        return Watched.apply
    R.reference_fwd_vjp(*R.case_args(case), chunk=chunk, matmul=by_site([site(n) for n in SITES]))


# The inputs whose scale the model leaves free (q and k are RMS-normalised): --input-scale
# multiplies them, to see which formats survive operands far larger than the generator's.
UNBOUNDED_INPUTS = ("v", "dout", "dfinal_ssm", "dfinal_v")


def scaled_case(case, factor: float) -> dict:
    if factor == 1.0:
        return case
    return {n: (x * factor).to(x.dtype) if n in UNBOUNDED_INPUTS else x for n, x in case.items()}


def study(case, fmt: str, chunk: int) -> dict:
    args = R.case_args(case)
    truth = R.reference_fwd_vjp(*args, chunk=64)  # agrees with the quadratic form to 1e-10
    raw = R.reference_fwd_vjp(*args, chunk=chunk, matmul=site_matmul(fmt))
    # The kernel hands its results over in the contract's dtypes.
    result = [x.to(R.RESULT_DTYPES[n]) for n, x in zip(R.RESULT_NAMES, raw)]
    report = R.compare(result, truth, case["cu_seqlens"])
    return {n: report["tensors"][n]["rel_l2"] for n in R.RESULT_NAMES}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="c00,c06", help="visible cases by name (comma-separated)")
    ap.add_argument("--formats", default="fp64,tf32,tf32x3,bf16,bf16x3",
                    help="comma-separated; fp64, tf32, tf32rz (toward zero), bf16, fp16, fp16s, tf32x3, bf16x3 or mix=F/F/F/F")
    ap.add_argument("--chunk", type=int, default=32)
    ap.add_argument("--long", type=int, default=0, help="also one sequence of this many tokens")
    ap.add_argument("--json", help="write the table here")
    ap.add_argument("--ranges", action="store_true", help="print the largest |operand| of each site instead")
    ap.add_argument("--input-scale", type=float, default=1.0,
                    help="multiply " + ", ".join(UNBOUNDED_INPUTS) + " by this (a power of two keeps them exact)")
    opts = ap.parse_args(argv)
    cases = [(c["name"], R.make_case(c["seq_lens"], c["seed"])) for c in Hn.load_cases(name_filter=opts.cases)]
    if opts.long:
        cases.append((f"L={opts.long}", R.make_case([opts.long], seed=71)))
    cases = [(name, scaled_case(case, opts.input_scale)) for name, case in cases]
    if opts.ranges:
        ranges: dict = {}
        for _, case in cases:
            operand_ranges(case, opts.chunk, ranges)
        for (name, role), top in sorted(ranges.items()):
            print(f"{name:>7} {role}: max |x| {top:.3e}")
        return 0
    formats = [f for f in opts.formats.split(",") if f]
    table = {}
    for name, case in cases:
        for fmt in formats:
            errs = study(case, fmt, opts.chunk)
            table[f"{name}/{fmt}"] = errs
            # A NaN error (a format that overflowed) sorts first.
            worst = sorted(errs.items(), key=lambda kv: -kv[1] if kv[1] == kv[1] else -float("inf"))[:4]
            print(f"{name:>8} {fmt:>7}: " + ", ".join(f"{n} {e:.2e}" for n, e in worst), flush=True)
    if opts.json:
        Path(opts.json).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
