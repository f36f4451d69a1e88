"""Run 93's localiser: the chunk-64 backward variants (v121, v123, v125) on the GPU against the
float64 reference on one small case, each gradient's error per sequence and chunk of 32 tokens, so
that a failing GPU test says where the job goes wrong (a sequence's last job only: dfinal_*; chunks
after the first: the chain's hand-off or the tail's carries; second halves only: half 1's operand
offsets; every chunk: a product's layout). Prints the worst chunks of each gradient."""
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "python"))
import mamba3_jit  # noqa: E402
from mamba3_jit.reference import RESULT_NAMES, case_args, make_case, reference_fwd_vjp  # noqa: E402
from mamba3_jit.training import _native_op  # noqa: E402

lens, heads = [150, 33, 64, 1, 0, 97], 2
case = make_case(lens, seed=7, H=heads)
truth = dict(zip(RESULT_NAMES, reference_fwd_vjp(*case_args(case))))
cu = case["cu_seqlens"].tolist()
# Per-token gradients and the token axis they are laid out on.
PER_TOKEN = {"dq": 1, "dk": 1, "dv": 1, "dadt": 2, "ddt": 2, "dtrap": 2, "dangles": 1}


def rel(a, b):
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b).clamp_min(1e-30))


for variant in sys.argv[1:] or ["v121", "v123", "v125"]:
    args = [t.cuda() for t in case_args(case)]
    got = _native_op("fwd_vjp")(*args, mamba3_jit.config_string({"variant": variant}))
    torch.cuda.synchronize()
    got = dict(zip(RESULT_NAMES, [g.double().cpu() for g in got]))
    print(f"== {variant}: whole tensors", " ".join(f"{n} {rel(got[n], truth[n].double()):.1e}"
                                                 for n in ("dq", "dk", "dv", "dadt", "ddt", "dtrap", "dangles",
                                                           "dq_bias", "dk_bias", "dd")))
    for name, axis in PER_TOKEN.items():
        rows = []
        for s in range(len(lens)):
            for j in range((lens[s] + 31) // 32):
                a, b = cu[s] + 32 * j, min(cu[s + 1], cu[s] + 32 * (j + 1))
                x = got[name].narrow(axis, a, b - a)
                y = truth[name].double().narrow(axis, a, b - a)
                rows.append((rel(x, y), s, j, a, b - 1))
        rows.sort(reverse=True)
        worst = "; ".join(f"seq {s} chunk {j} (tokens {a}..{b}) {e:.1e}" for e, s, j, a, b in rows[:3])
        print(f"  {name:8s} worst chunks: {worst}")
