"""The training op: `mamba3_siso`, a torch custom op with a fake implementation and an autograd
formula, so that it runs inside `loss.backward()`, `torch.compile(fullgraph=True)` and
activation checkpointing.

First version: both directions run the project's joint forward + VJP kernels. The forward calls
them with zero cotangents and keeps only the five forward results; the backward calls them again
with autograd's cotangents and keeps the eleven gradients, so its gradients are bitwise those of
`mamba3_siso_varlen_joint_states_full_vjp` on the same cotangents. The forward saves only its
inputs (recomputation). Initial states are not supported by the kernels yet and raise
NotImplementedError.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import _native

_OP_CONFIG = ""  # the operator's default variant
_INPUT_NAMES = ("q", "k", "v", "adt", "dt", "trap", "q_bias", "k_bias", "angles", "d", "z")


def _state_shapes(v: Tensor, q: Tensor, angles: Tensor, num_seqs: int):
    H, P, N, A = v.shape[2], v.shape[3], q.shape[3], angles.shape[3]
    return (num_seqs, H, A), (num_seqs, H, P, N), (num_seqs, H, N), (num_seqs, H, P)


def _zero_cotangents(q, v, angles, cu_seqlens):
    S = cu_seqlens.shape[0] - 1
    fa, fs, fk, fv = _state_shapes(v, q, angles, S)
    return (torch.zeros_like(v), v.new_zeros(fa), q.new_zeros(fs, dtype=torch.float32),
            q.new_zeros(fk, dtype=torch.float32), v.new_zeros(fv))


@torch.library.custom_op("mamba3_jit::siso_forward", mutates_args=())
def _siso_forward(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                  q_bias: Tensor, k_bias: Tensor, angles: Tensor, d: Tensor, z: Tensor,
                  cu_seqlens: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    _native.load()
    results = torch.ops.mamba3_jit.fwd_vjp(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens,
                                           *_zero_cotangents(q, v, angles, cu_seqlens), _OP_CONFIG)
    return tuple(results[:5])


@_siso_forward.register_fake
def _(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens):
    S = cu_seqlens.shape[0] - 1
    fa, fs, fk, fv = _state_shapes(v, q, angles, S)
    return (v.new_empty(v.shape), angles.new_empty(fa), q.new_empty(fs, dtype=torch.float32),
            q.new_empty(fk, dtype=torch.float32), v.new_empty(fv))


@torch.library.custom_op("mamba3_jit::siso_backward", mutates_args=())
def _siso_backward(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                   q_bias: Tensor, k_bias: Tensor, angles: Tensor, d: Tensor, z: Tensor,
                   cu_seqlens: Tensor, dout: Tensor, dfinal_angle: Tensor, dfinal_ssm: Tensor,
                   dfinal_k: Tensor, dfinal_v: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor,
                                                                Tensor, Tensor, Tensor, Tensor, Tensor,
                                                                Tensor]:
    _native.load()
    results = torch.ops.mamba3_jit.fwd_vjp(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens,
                                           dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v, _OP_CONFIG)
    return tuple(results[5:])


@_siso_backward.register_fake
def _(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout, dfinal_angle, dfinal_ssm,
      dfinal_k, dfinal_v):
    return tuple(x.new_empty(x.shape) for x in (q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v):
    saved = ctx.saved_tensors
    q, v, angles, cu_seqlens = saved[0], saved[2], saved[8], saved[11]
    zeros = _zero_cotangents(q, v, angles, cu_seqlens)
    # The joint kernels take every cotangent; autograd's None means zero.
    cotangents = [c if c is not None else zero
                  for c, zero in zip((dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v), zeros)]
    cotangents = [c.contiguous().to(zero.dtype) for c, zero in zip(cotangents, zeros)]
    grads = _siso_backward(*saved, *cotangents)
    return (*grads, None)


torch.library.register_autograd("mamba3_jit::siso_forward", _backward, setup_context=_setup_context)


def mamba3_siso(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor, q_bias: Tensor,
                k_bias: Tensor, angles: Tensor, d: Tensor, z: Tensor, cu_seqlens: Tensor,
                initial_states: Optional[Sequence[Tensor]] = None, return_final_states: bool = False):
    """A packed variable-length Mamba-3 SISO layer, differentiable through autograd.

    Returns the output (1, T, H, P), and with return_final_states=True also the final
    (angle, ssm, k, v) states. Arguments as in SPEC section 1.
    """
    if initial_states is not None:
        raise NotImplementedError(
            "mamba3_siso: initial_states are not supported by the kernels yet; pass None "
            "(every sequence then starts from zero states)")
    out, fa, fs, fk, fv = _siso_forward(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens)
    if return_final_states:
        return out, (fa, fs, fk, fv)
    return out
