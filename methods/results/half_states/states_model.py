"""The whole chunk-64 backward's float64 model (methods/bank_model/backward64_full_model.py) with the
entering states the forward hands on rounded as v252's forward rounds them: IEEE half times a power
of two a 16 x 64 block, the block's largest element in [2^14, 2^15). Prints every gradient's
relative L2 error against the float64 truth, the states exact ("none") or rounded ("half").

Run: python3 methods/results/half_states/states_model.py {none|half} [LENS [SEED [HEADS]]]
"""
import sys
from pathlib import Path

import numpy as np
import torch

root = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(root / "methods" / "bank_model"))
sys.path.insert(0, str(root / "python"))
import backward64_full_model as bm  # noqa: E402
import forward64_model as f64  # noqa: E402


def half_blocks(x, rows=16, cols=64):
    """x as v252 hands it on: each rows x cols block in half after its own power-of-two scale."""
    x = np.asarray(x, np.float64)
    y = np.empty_like(x)
    for r in range(0, x.shape[0], rows):
        for c in range(0, x.shape[1], cols):
            t = x[r:r + rows, c:c + cols]
            m = np.abs(t).max()
            s = 1.0 if m == 0 else 2.0 ** (14 - np.floor(np.log2(m)))
            y[r:r + rows, c:c + cols] = (t * s).astype(np.float16).astype(np.float64) / s
    return y


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "half"
    lens = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "300,257,64,1,97").split(",")]
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 11
    heads = int(sys.argv[4]) if len(sys.argv) > 4 else 4
    plain = f64.model_forward

    def rounded(case, staged=False):
        out, states, chunk_base = plain(case, staged)
        if mode == "half":
            for key in states:
                states[key] = half_blocks(states[key]).astype(np.float32)
        return out, states, chunk_base

    f64.model_forward = rounded
    case = f64.make_case(lens, seed=seed, H=heads)
    torch.set_grad_enabled(True)
    for name, err in bm.compare(case).items():
        print(f"{mode} {name:8s} {err:.3e}")


if __name__ == "__main__":
    main()
