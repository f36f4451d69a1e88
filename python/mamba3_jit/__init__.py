"""mamba3-jit: a fused CUDA forward + VJP operator for packed variable-length Mamba-3 SISO layers.

The native library is loaded on first use, so `import mamba3_jit` (and its `reference` module)
works on machines without a GPU or a build.
"""
from __future__ import annotations

from typing import Mapping, Optional, Union

from . import _native
from .training import mamba3_siso

__all__ = ["mamba3_siso", "mamba3_siso_varlen_joint_states_full_vjp", "bind", "fwd_vjp_with_states", "validate",
           "specializations", "config_string"]

ConfigLike = Optional[Union[str, Mapping[str, object]]]


def config_string(config: ConfigLike) -> str:
    """Turns a solver's config dict into the operator's "key=value,..." form."""
    if config is None:
        return ""
    if isinstance(config, str):
        return config
    return ",".join(f"{k}={v}" for k, v in config.items())


def mamba3_siso_varlen_joint_states_full_vjp(
        q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout,
        dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v, *, config: ConfigLike = None):
    """Forward and full VJP in one call; returns the 16 tensors of SPEC section 1, in order."""
    return tuple(_native.op("fwd_vjp")(
        q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout,
        dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v, config_string(config)))


def bind(config: ConfigLike = None):
    """`mamba3_siso_varlen_joint_states_full_vjp` with its configuration fixed. The config's text
    is made here once instead of on every call (about 1 us of host time a call for a dict)."""
    text = config_string(config)

    def fwd_vjp(q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout,
                dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v):
        return tuple(_native.op("fwd_vjp")(
            q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout,
            dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v, text))

    fwd_vjp.config = text
    return fwd_vjp


def fwd_vjp_with_states(
        q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout,
        dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v, *, initial_states, config: ConfigLike = None):
    """The joint forward + VJP starting every sequence from `initial_states` = (angle (S,H,A) bf16,
    ssm (S,H,P,N) fp32, k (S,H,N) fp32, v (S,H,P) bf16), e.g. a previous call's final states.
    Returns the 16 results followed by the gradients of the 4 initial states. Kernel variant v6,
    checked against the float64 truth with states in tests/python/test_initial_states_gpu.py."""
    angle0, ssm0, k0, v0 = initial_states
    return tuple(_native.op("fwd_vjp_states")(
        q, k, v, adt, dt, trap, q_bias, k_bias, angles, d, z, cu_seqlens, dout,
        dfinal_angle, dfinal_ssm, dfinal_k, dfinal_v, angle0, ssm0, k0, v0, config_string(config)))


def validate(*args, require_cuda: bool = True) -> None:
    """Runs only the argument checks of the operator (no GPU needed with require_cuda=False)."""
    _native.op("validate")(*args, require_cuda)


def specializations(arch: str = "") -> list:
    """Names of every kernel specialisation the dispatcher can request."""
    return list(_native.op("specializations")(arch))
