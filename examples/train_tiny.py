"""Trains a tiny Mamba-3 SISO block with the fused training op `mamba3_jit.mamba3_siso`.

Task: every token carries random features x_t; the target is their decayed running sum
r_t = LAMBDA * r_{t-1} + x_t, restarted at every sequence boundary. Sequences of random lengths
are packed into one row with cu_seqlens, so the block has to respect the boundaries. At the end
the same block is timed with the eager float32 reference layer (mamba3_jit.reference) in the
kernel's place.

    python3 examples/train_tiny.py [--steps 300] [--seed 0] [--segments 2]

--segments 2 runs every batch as two calls per step, the second starting from the first call's
final states (gradients flow back through them), as when a long sequence is processed in pieces.
"""
import argparse
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import mamba3_jit  # noqa: E402
from mamba3_jit.reference import layer_forward  # noqa: E402

H, N, P, A = 32, 128, 64, 32           # the frozen shape family; G = 1
FEATURES, WIDTH = 16, 128
LAMBDA = 0.9


def kernel_layer(*args, initial_states=None):
    return mamba3_jit.mamba3_siso(*args, initial_states=initial_states, return_final_states=True)


def eager_layer(*args, initial_states=None):
    """The same layer in plain PyTorch: float32, one loop over sequences, quadratic form."""
    out, *states = layer_forward(*(x.float() if x.is_floating_point() else x for x in args),
                                 initial_states=initial_states)
    return out.to(torch.bfloat16), tuple(states)


class TinyMamba3(nn.Module):
    """Input projection, one Mamba-3 SISO layer, output projection."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(FEATURES, WIDTH)
        self.to_q, self.to_k = nn.Linear(WIDTH, N), nn.Linear(WIDTH, N)
        self.to_v, self.to_z = nn.Linear(WIDTH, H * P), nn.Linear(WIDTH, H * P)
        self.to_angles = nn.Linear(WIDTH, H * A)
        self.to_dt, self.to_trap = nn.Linear(WIDTH, H), nn.Linear(WIDTH, H)
        # dt starts log-uniform in [1e-3, 1e-1] and the decay rate in [1, 16], as in the
        # contract's case generator: the range the kernels are tuned and checked on.
        dt0 = torch.exp(torch.rand(H) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        self.dt_bias = nn.Parameter(dt0 + torch.log(-torch.expm1(-dt0)))       # softplus^-1
        self.a_log = nn.Parameter(torch.log(torch.rand(H) * 15 + 1))
        self.q_bias, self.k_bias = nn.Parameter(torch.zeros(H, N)), nn.Parameter(torch.zeros(H, N))
        self.d = nn.Parameter(torch.ones(H))
        self.head = nn.Linear(H * P, FEATURES)

    def forward(self, x, segments, layer):
        """x (T, FEATURES); segments: (token index, cu_seqlens) per call, the states of each call
        handed to the next; returns the prediction (T, FEATURES)."""
        T = x.shape[0]
        h = self.embed(x)
        bf16 = torch.bfloat16

        def rms(t):
            return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)

        # Every tensor the op takes must be contiguous: (1, T, ...) rows or (1, H, T) columns.
        dt = F.softplus(self.to_dt(h) + self.dt_bias)                           # (T, H)
        per_token = {
            "q": rms(self.to_q(h)).to(bf16).view(1, T, 1, N),
            "k": rms(self.to_k(h)).to(bf16).view(1, T, 1, N),
            "v": self.to_v(h).to(bf16).view(1, T, H, P),
            "adt": (-torch.exp(self.a_log) * dt).t().contiguous().unsqueeze(0),
            "dt": dt.t().contiguous().unsqueeze(0),
            "trap": self.to_trap(h).t().contiguous().to(bf16).unsqueeze(0),
            "angles": self.to_angles(h).to(bf16).view(1, T, H, A),
            "z": self.to_z(h).to(bf16).view(1, T, H, P),
        }
        token_dim = {"adt": 2, "dt": 2, "trap": 2}
        y = x.new_zeros(1, T, H, P, dtype=bf16)
        states = None
        for idx, cu in segments:
            t = {n: u.index_select(token_dim.get(n, 1), idx) for n, u in per_token.items()}
            out, states = layer(t["q"], t["k"], t["v"], t["adt"], t["dt"], t["trap"], self.q_bias,
                                self.k_bias, t["angles"], self.d, t["z"], cu, initial_states=states)
            y = y.index_copy(1, idx, out)
        return self.head(y.float().view(T, H * P))


def make_batch(num_seqs, min_len, max_len, num_segments, gen, device):
    """Packed random sequences, their targets, and the per-call token indices: call j gets the
    j-th piece of every sequence, so a sequence's pieces follow each other from call to call."""
    lens = torch.randint(min_len, max_len + 1, (num_seqs,), generator=gen).tolist()
    x = torch.randn(sum(lens), FEATURES, generator=gen)
    targets, start = [], 0
    for L in lens:
        t = torch.arange(L, dtype=torch.float64)
        decay = (LAMBDA ** (t[:, None] - t[None, :])).tril()
        targets.append((decay @ x[start:start + L].double()).float())
        start += L
    # Scale to unit variance: the stationary variance of the running sum is 1 / (1 - LAMBDA^2).
    target = torch.cat(targets) * math.sqrt(1 - LAMBDA ** 2)
    starts = torch.tensor([0] + lens).cumsum(0)
    segments = []
    for j in range(num_segments):
        pieces = [torch.arange(s + L * j // num_segments, s + L * (j + 1) // num_segments)
                  for s, L in zip(starts.tolist(), lens)]
        cu = torch.tensor([0] + [len(p) for p in pieces]).cumsum(0).to(torch.int32)
        segments.append((torch.cat(pieces).to(device), cu.to(device)))
    return x.to(device), target.to(device), segments


def train_step(model, opt, batch, layer):
    x, target, segments = batch
    loss = F.mse_loss(model(x, segments, layer), target)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def timed_steps(model, opt, batches, layer, device):
    train_step(model, opt, batches[0], layer)       # JIT compilation and allocator warm-up
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for batch in batches[1:]:
        train_step(model, opt, batch, layer)
    torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / (len(batches) - 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--device", default="cuda", help="a CUDA device (default cuda)")
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and data (default 0)")
    parser.add_argument("--segments", type=int, default=1,
                        help="calls per batch, each starting from the previous call's final states")
    parser.add_argument("--log-every", type=int, default=25, help="print the loss every N steps")
    parser.add_argument("--timing-steps", type=int, default=6,
                        help="steps timed for each of the kernel and the eager layer")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        sys.exit(f"train_tiny.py: needs a CUDA device; got --device {args.device} and "
                 f"torch.cuda.is_available() = {torch.cuda.is_available()}")
    if args.segments < 1 or args.steps < 1 or args.timing_steps < 2:
        sys.exit("train_tiny.py: --segments and --steps must be >= 1, --timing-steps >= 2")

    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    model = TinyMamba3().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def batch():
        return make_batch(4, 129, 400, args.segments, gen, device)

    print(f"training {sum(p.numel() for p in model.parameters())} parameters for {args.steps} steps "
          f"on {torch.cuda.get_device_name(device)} ({args.segments} call(s) per batch)")
    recent = []
    for step in range(1, args.steps + 1):
        recent.append(train_step(model, opt, batch(), kernel_layer).item())
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            print(f"step {step:5d}  loss {sum(recent) / len(recent):.4f}")
            recent = []

    batches = [batch() for _ in range(args.timing_steps)]
    kernel_s = timed_steps(model, opt, batches, kernel_layer, device)
    eager_s = timed_steps(model, opt, batches, eager_layer, device)
    print(f"mean step: mamba3_siso {kernel_s * 1e3:.2f} ms, eager reference {eager_s * 1e3:.2f} ms "
          f"({eager_s / kernel_s:.1f}x)")


if __name__ == "__main__":
    main()
