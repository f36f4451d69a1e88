"""Kernel variant v6 (initial states) against the float64 truth with states, and the one-call vs
two-call identity on the GPU."""
import pytest
import torch

import mamba3_jit
from mamba3_jit.reference import (RESULT_WITH_STATES_NAMES, case_args, compare, make_case,
                                  reference_fwd_vjp_with_states)
from mamba3_jit.training import _native_op


def test_variant_and_entry_point_must_agree_on_states():
    case = make_case([4], seed=1)
    with pytest.raises(ValueError, match="needs initial states"):
        mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(case), config={"variant": "v6"})
    states = (case["dfinal_angle"], case["dfinal_ssm"], case["dfinal_k"], case["dfinal_v"])
    with pytest.raises(ValueError, match="does not take initial states"):
        mamba3_jit.fwd_vjp_with_states(*case_args(case), initial_states=states, config={"variant": "v5"})


def _random_states(case, seed):
    g = torch.Generator().manual_seed(seed)
    S, H, A = case["dfinal_angle"].shape
    P, N = case["dfinal_ssm"].shape[2:]
    return (torch.randn(S, H, A, generator=g).mul(3).to(torch.bfloat16).cuda(),
            torch.randn(S, H, P, N, generator=g).mul(0.1).cuda(),
            torch.randn(S, H, N, generator=g).cuda(),
            torch.randn(S, H, P, generator=g).to(torch.bfloat16).cuda())


@pytest.mark.gpu
@pytest.mark.parametrize("seq_lens", [[129, 150, 0, 1], [64, 300]])
def test_v6_matches_the_float64_truth_with_states(seq_lens):
    case = make_case(seq_lens, seed=3, device="cuda")
    states = _random_states(case, 4)
    result = mamba3_jit.fwd_vjp_with_states(*case_args(case), initial_states=states)
    truth = reference_fwd_vjp_with_states(*case_args(case), initial_states=states)
    report = compare(result[:16], truth[:16], case["cu_seqlens"])
    assert report["ok"], report["failures"]
    for name, x, t in zip(RESULT_WITH_STATES_NAMES[16:], result[16:], truth[16:]):
        err = (x.double() - t).norm() / t.norm().clamp_min(1e-30)
        assert err < 1e-2, f"{name}: rel-L2 {err:.2e}"


@pytest.mark.gpu
def test_v6_with_zero_states_matches_v5():
    case = make_case([129, 150, 191], seed=5, device="cuda")
    zeros = tuple(torch.zeros_like(x) for x in (case["dfinal_angle"], case["dfinal_ssm"], case["dfinal_k"],
                                               case["dfinal_v"]))
    with_states = mamba3_jit.fwd_vjp_with_states(*case_args(case), initial_states=zeros)
    plain = mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(case), config={"variant": "v5"})
    truth = reference_fwd_vjp_with_states(*case_args(case), initial_states=zeros)
    assert compare(with_states[:16], truth[:16], case["cu_seqlens"])["ok"]
    for x, y in zip(with_states[:16], plain):
        assert (x.double() - y.double()).norm() <= 1e-2 * y.double().norm().clamp_min(1e-30)


@pytest.mark.gpu
def test_forward_only_with_states_and_missing_cotangents():
    """forward_states returns bitwise the joint op's five forward results; None cotangents give
    bitwise what zero tensors give, the gradients of the states included."""
    case = make_case([300, 0, 64, 1], seed=35, device="cuda")
    args = list(case_args(case))
    states = _random_states(case, 35)
    forward = _native_op("forward_states")(*args[:12], *states, "")
    joint = _native_op("fwd_vjp_states")(*args, *states, "")
    assert len(forward) == 5
    for name, a, b in zip(RESULT_WITH_STATES_NAMES, forward, joint):
        assert torch.equal(a, b), f"forward-only {name} differs from the joint op's"
    with_none = args[:12] + [None] * 5
    with_zero = args[:12] + [torch.zeros_like(t) for t in args[12:]]
    got = _native_op("fwd_vjp_states")(*with_none, *states, "")
    want = _native_op("fwd_vjp_states")(*with_zero, *states, "")
    for name, a, b in zip(RESULT_WITH_STATES_NAMES, got, want):
        assert torch.equal(a, b), f"None cotangents: {name} differs from zero cotangents"
