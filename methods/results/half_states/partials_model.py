"""The whole chunk-64 backward's float64 model (methods/bank_model/backward64_full_model.py) with the
per-head dq and dk partials rounded as a backward that hands them to the reduce in IEEE half would:
each (token, head) row of 128 in half after a power of two that puts its largest element in
[2^14, 2^15), then summed over the heads. Prints dq's and dk's relative L2 error against the
float64 truth with the partials exact ("none") or rounded ("half"); the other gradients do not
read the partials (the bias sums take the fp32 rows in registers).

Run: python3 methods/results/half_states/partials_model.py [LENS [SEED [HEADS]]]
"""
import inspect
import sys
from pathlib import Path

import numpy as np
import torch

root = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(root / "methods" / "bank_model"))
sys.path.insert(0, str(root / "python"))
import backward64_full_model as bm  # noqa: E402
import forward64_model as f64  # noqa: E402
from mamba3_jit.reference import RESULT_NAMES, case_args, reference_fwd_vjp  # noqa: E402


def half_rows(x):
    """x [T][H][N] with each row of N in half after its own power-of-two scale."""
    m = np.abs(x).max(axis=2, keepdims=True)
    e = np.floor(np.log2(np.where(m > 0, m, 1.0)))
    s = np.where(m > 0, 2.0 ** (14 - e), 1.0)
    return (x * s).astype(np.float16).astype(np.float64) / s


def model_with_half_partials():
    """backward64_full_model's model_backward64 with each (token, head) row rounded by half_rows before
    the sum over the heads."""
    src = inspect.getsource(bm.model_backward64)
    old = 'return {"dq": dqh.sum(1), "dk": dkh.sum(1),'
    assert old in src, "the model's return line moved"
    ns = dict(vars(bm))
    ns["half_rows"] = half_rows
    exec(src.replace(old, 'return {"dq": half_rows(dqh).sum(1), "dk": half_rows(dkh).sum(1),'), ns)
    return ns["model_backward64"]


def main():
    lens = [int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "300,257,64,1,97").split(",")]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 11
    heads = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    case = f64.make_case(lens, seed=seed, H=heads)
    torch.set_grad_enabled(True)
    truth = dict(zip(RESULT_NAMES, reference_fwd_vjp(*case_args(case))))
    for mode, model in (("none", bm.model_backward64), ("half", model_with_half_partials())):
        got = model(case)
        for name in ("dq", "dk"):
            want = truth[name].double()
            want = want.reshape(got[name].shape) if want.numel() == got[name].size else want
            print(f"{mode} {name} {bm.rel(got[name], want.numpy()):.3e}")


if __name__ == "__main__":
    main()
