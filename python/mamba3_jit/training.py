"""The training op: `mamba3_siso`, torch custom ops with fake implementations and autograd
formulas, so that it runs inside `loss.backward()`, `torch.compile(fullgraph=True)` and
activation checkpointing. docs/training.md describes it for users.

The forward runs the kernels' forward walk alone (the native `forward` ops: no gradient work,
no cotangents); the backward runs the joint forward + VJP kernels with autograd's cotangents, so
its gradients are bitwise those of the joint entry point on the same cotangents and
configuration. A cotangent autograd leaves as None reaches the kernels as a null pointer, read as
zero: nothing is materialised, and a backward with every cotangent None launches nothing. The
forward saves only its inputs (recomputation).

Two pairs of ops:
- without initial states, `mamba3_jit::siso_forward` / `siso_backward` over the native `forward`
  and `fwd_vjp` (the default, fastest variant);
- with initial states, `mamba3_jit::siso_forward_states` / `siso_backward_states` over
  `forward_states` and `fwd_vjp_states` (variant v6), whose backward also returns the gradients
  of the four states.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor

from . import _native

_OP_CONFIG = ""         # fwd_vjp's default variant
_STATES_CONFIG = ""     # fwd_vjp_states' default variant (v6, the one that takes states)
_INPUT_NAMES = ("q", "k", "v", "adt", "dt", "trap", "q_bias", "k_bias", "angles", "d", "z")
STATE_NAMES = ("angle", "ssm", "k", "v")
_STATE_LAYOUTS = ("(S, H, A)", "(S, H, P, N)", "(S, H, N)", "(S, H, P)")
_STATE_DTYPES = (torch.bfloat16, torch.float32, torch.float32, torch.bfloat16)


def _native_op(name: str):
    """The one place the custom ops reach the native library through, loading it on first use
    (and the seam where the CPU tests put the float64 reference in the kernels' place)."""
    return _native.op(name)


def _state_shapes(v: Tensor, q: Tensor, angles: Tensor, num_seqs: int):
    H, P, N, A = v.shape[2], v.shape[3], q.shape[3], angles.shape[3]
    return (num_seqs, H, A), (num_seqs, H, P, N), (num_seqs, H, N), (num_seqs, H, P)


_COTANGENT_DTYPES = (torch.bfloat16, torch.bfloat16, torch.float32, torch.float32, torch.bfloat16)


def _kernel_cotangents(given):
    """Autograd's cotangents as the kernels take them: None stays None (a null pointer, read as
    zero), anything else in the kernels' dtype and layout."""
    return [None if c is None else c.contiguous().to(dtype) for c, dtype in zip(given, _COTANGENT_DTYPES)]


def _forward_fake(q, v, angles, cu_seqlens):
    S = cu_seqlens.shape[0] - 1
    fa, fs, fk, fv = _state_shapes(v, q, angles, S)
    return (v.new_empty(v.shape), angles.new_empty(fa), q.new_empty(fs, dtype=torch.float32),
            q.new_empty(fk, dtype=torch.float32), v.new_empty(fv))


# ------------------------------------------------------------------------------------------------
# Without initial states
# ------------------------------------------------------------------------------------------------

@torch.library.custom_op("mamba3_jit::siso_forward", mutates_args=())
def _siso_forward(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                  q_bias: Tensor, k_bias: Tensor, angles: Tensor, d: Tensor, z: Tensor,
                  cu_seqlens: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    results = _native_op("forward")(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, _OP_CONFIG)
    return tuple(results)


@_siso_forward.register_fake
def _(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens):
    return _forward_fake(q, v, angles, cu_seqlens)


@torch.library.custom_op("mamba3_jit::siso_backward", mutates_args=())
def _siso_backward(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                   q_bias: Tensor, k_bias: Tensor, angles: Tensor, d: Tensor, z: Tensor,
                   cu_seqlens: Tensor, dout: Optional[Tensor], dfinal_angle: Optional[Tensor],
                   dfinal_ssm: Optional[Tensor], dfinal_k: Optional[Tensor],
                   dfinal_v: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor,
                                                                Tensor, Tensor, Tensor, Tensor, Tensor,
                                                                Tensor]:
    results = _native_op("fwd_vjp")(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens,
                                    dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v, _OP_CONFIG)
    return tuple(results[5:])


@_siso_backward.register_fake
def _(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout, dfinal_angle, dfinal_ssm,
      dfinal_k, dfinal_v):
    return tuple(x.new_empty(x.shape) for x in (q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z))


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)
    # Unused outputs' cotangents stay None instead of zero tensors autograd would build; the
    # kernels read a missing cotangent as zero.
    ctx.set_materialize_grads(False)


def _backward(ctx, dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v):
    saved = ctx.saved_tensors
    cotangents = _kernel_cotangents((dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v))
    if all(c is None for c in cotangents):
        return (None,) * len(saved)
    grads = _siso_backward(*saved, *cotangents)
    return (*grads, None)


torch.library.register_autograd("mamba3_jit::siso_forward", _backward, setup_context=_setup_context)


# ------------------------------------------------------------------------------------------------
# With initial states
# ------------------------------------------------------------------------------------------------

@torch.library.custom_op("mamba3_jit::siso_forward_states", mutates_args=())
def _siso_forward_states(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                         q_bias: Tensor, k_bias: Tensor, angles: Tensor, d: Tensor, z: Tensor,
                         cu_seqlens: Tensor, initial_angle: Tensor, initial_ssm: Tensor,
                         initial_k: Tensor, initial_v: Tensor
                         ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    results = _native_op("forward_states")(
        q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens,
        initial_angle, initial_ssm, initial_k, initial_v, _STATES_CONFIG)
    return tuple(results)


@_siso_forward_states.register_fake
def _(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, initial_angle, initial_ssm,
      initial_k, initial_v):
    return _forward_fake(q, v, angles, cu_seqlens)


@torch.library.custom_op("mamba3_jit::siso_backward_states", mutates_args=())
def _siso_backward_states(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor,
                          q_bias: Tensor, k_bias: Tensor, angles: Tensor, d: Tensor, z: Tensor,
                          cu_seqlens: Tensor, dout: Optional[Tensor], dfinal_angle: Optional[Tensor],
                          dfinal_ssm: Optional[Tensor], dfinal_k: Optional[Tensor],
                          dfinal_v: Optional[Tensor], initial_angle: Tensor, initial_ssm: Tensor,
                          initial_k: Tensor, initial_v: Tensor
                          ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
                                     Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    results = _native_op("fwd_vjp_states")(
        q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens,
        dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v,
        initial_angle, initial_ssm, initial_k, initial_v, _STATES_CONFIG)
    return tuple(results[5:])


@_siso_backward_states.register_fake
def _(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout, dfinal_angle, dfinal_ssm,
      dfinal_k, dfinal_v, initial_angle, initial_ssm, initial_k, initial_v):
    return tuple(x.new_empty(x.shape) for x in (q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z,
                                                 initial_angle, initial_ssm, initial_k, initial_v))


def _backward_states(ctx, dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v):
    saved = ctx.saved_tensors
    inputs, states = saved[:12], saved[12:]
    cotangents = _kernel_cotangents((dout, dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v))
    if all(c is None for c in cotangents):
        return (None,) * len(saved)
    grads = _siso_backward_states(*inputs, *cotangents, *states)
    return (*grads[:11], None, *grads[11:])


torch.library.register_autograd("mamba3_jit::siso_forward_states", _backward_states,
                                setup_context=_setup_context)


# ------------------------------------------------------------------------------------------------
# The entry point
# ------------------------------------------------------------------------------------------------

def _check_initial_states(initial_states, q: Tensor, v: Tensor, angles: Tensor,
                          cu_seqlens: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """A wrong tuple fails here, naming the state, before any kernel is launched or anything is
    traced into a graph; layout and alignment are left to the native op, whose message names
    the state as well."""
    if not isinstance(initial_states, (tuple, list)):
        raise TypeError("mamba3_siso: initial_states must be None or a tuple of 4 tensors "
                        f"(angle, ssm, k, v), got {type(initial_states).__name__}")
    if len(initial_states) != 4:
        raise ValueError("mamba3_siso: initial_states must hold 4 tensors (angle, ssm, k, v), "
                         f"got {len(initial_states)}")
    # Malformed inputs leave nothing to derive the expected shapes from; the native op's own
    # checks name the offending input in that case.
    shapes = None
    if q.dim() == 4 and v.dim() == 4 and angles.dim() == 4 and cu_seqlens.dim() == 1:
        shapes = _state_shapes(v, q, angles, cu_seqlens.shape[0] - 1)
    for i, (name, x) in enumerate(zip(STATE_NAMES, initial_states)):
        what = f"mamba3_siso: initial_states[{i}] ({name} state)"
        if not isinstance(x, Tensor):
            raise TypeError(f"{what} must be a tensor, got {type(x).__name__}")
        if x.dtype != _STATE_DTYPES[i]:
            raise TypeError(f"{what} expected dtype {_STATE_DTYPES[i]}, got {x.dtype}")
        if x.device != q.device:
            raise ValueError(f"{what} expected device {q.device} (the device of q), got {x.device}")
        if shapes is not None and tuple(x.shape) != shapes[i]:
            raise ValueError(f"{what} expected shape {_STATE_LAYOUTS[i]} = {shapes[i]}, "
                             f"got {tuple(x.shape)}")
    return tuple(initial_states)


def mamba3_siso(q: Tensor, k: Tensor, v: Tensor, adt: Tensor, dt: Tensor, trap: Tensor, q_bias: Tensor,
                k_bias: Tensor, angles: Tensor, d: Tensor, z: Tensor, cu_seqlens: Tensor,
                initial_states: Optional[Sequence[Tensor]] = None, return_final_states: bool = False):
    """A packed variable-length Mamba-3 SISO layer, differentiable through autograd.

    Returns the output (1, T, H, P), and with return_final_states=True also the final
    (angle, ssm, k, v) states. Arguments as in SPEC section 1.

    initial_states: None (every sequence starts from zero states) or (angle (S,H,A) bf16,
    ssm (S,H,P,N) fp32, k (S,H,N) fp32, v (S,H,P) bf16), the shapes and dtypes of the final
    states; row i is the state sequence i starts from, normally the final states of a previous
    call on the same sequences. Gradients flow to these four tensors too.
    """
    inputs = (q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens)
    if initial_states is None:
        out, fa, fs, fk, fv = _siso_forward(*inputs)
    else:
        states = _check_initial_states(initial_states, q, v, angles, cu_seqlens)
        out, fa, fs, fk, fv = _siso_forward_states(*inputs, *states)
    if return_final_states:
        return out, (fa, fs, fk, fv)
    return out
