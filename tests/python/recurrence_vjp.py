"""The VJP of an independent test recurrence by float64 autograd, shared by the reference tests
with and without initial states."""
import torch

from mamba3_jit import reference as R


def autograd_fwd_vjp(forward, case, extra_leaves=()):
    """Runs forward(*diff_args, *extra_leaves, cu_seqlens) in float64 and returns its outputs
    followed by the gradients of every leaf under the case's cotangents (zero where unused)."""
    leaves = [case[n].detach().double().requires_grad_(True) for n in R.DIFF_ARG_NAMES]
    leaves += [x.detach().double().requires_grad_(True) for x in extra_leaves]
    outs = forward(*leaves, case["cu_seqlens"])
    cots = [case[n].double() for n in R.COTANGENT_NAMES]
    used = [(o, c) for o, c in zip(outs, cots) if o.requires_grad]
    grads = torch.autograd.grad([o for o, _ in used], leaves, [c for _, c in used], allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]
    return tuple(o.detach() for o in outs) + tuple(grads)
