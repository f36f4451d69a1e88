"""The whole chunk-64 backward's float64 model (methods/bank_model/backward64_full_model.py) with any of
the three hand-offs a next backward would make in IEEE half, each after a power of two of its own
block: the entering states (16 x 64 blocks, as v252), the per-head dq/dk rows (a row of 128, as
v254), and the state gradient a job hands its predecessor (the 1,024 words of each warp's block, as
the blueprint proposes). Prints every gradient's relative L2 error against the float64 truth.

Run: python3 methods/results/half_states/handoffs_model.py [states,partials,gradient | none] [LENS [SEED [HEADS]]]
"""
import sys
from pathlib import Path

import numpy as np
import torch

root = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(root / "methods" / "bank_model"))
sys.path.insert(0, str(root / "methods" / "results" / "half_states"))
sys.path.insert(0, str(root / "python"))
import backward64_full_model as bm  # noqa: E402
import backward64kv_model as kvm  # noqa: E402
import forward64_model as f64  # noqa: E402
from partials_model import model_with_half_partials  # noqa: E402
from states_model import half_blocks  # noqa: E402


def half_flat_blocks(x, size=1024):
    """A flat array in half, each run of `size` words after its own power of two."""
    x = np.asarray(x, np.float64)
    y = np.empty_like(x)
    for i in range(0, x.size, size):
        t = x[i:i + size]
        m = np.abs(t).max()
        s = 1.0 if m == 0 else 2.0 ** (14 - np.floor(np.log2(m)))
        y[i:i + size] = (t * s).astype(np.float16).astype(np.float64) / s
    return y


def main():
    which = set((sys.argv[1] if len(sys.argv) > 1 else "states,partials,gradient").split(","))
    lens = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "300,257,64,1,97").split(",")]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 11
    heads = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    if "states" in which:
        plain_forward = f64.model_forward

        def rounded_forward(case, staged=False):
            out, states, chunk_base = plain_forward(case, staged)
            for key in states:
                states[key] = half_blocks(states[key]).astype(np.float32)
            return out, states, chunk_base

        f64.model_forward = rounded_forward
    if "gradient" in which:
        plain_job = kvm.run_job

        def rounded_job(inp, carries, hand_offs, flags, *args, **kwargs):
            before = set(hand_offs)
            result = plain_job(inp, carries, hand_offs, flags, *args, **kwargs)
            for key in set(hand_offs) - before:
                hand_offs[key] = half_flat_blocks(hand_offs[key]).astype(np.float32)
            return result

        kvm.run_job = rounded_job
    if "partials" in which:
        bm.model_backward64 = model_with_half_partials()
    case = f64.make_case(lens, seed=seed, H=heads)
    torch.set_grad_enabled(True)
    label = "+".join(sorted(which))
    for name, err in bm.compare(case).items():
        print(f"{label} {name:8s} {err:.3e}")


if __name__ == "__main__":
    main()
