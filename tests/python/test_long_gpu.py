"""The operator against the float64 truth on long inputs: one sequence of 32768 tokens, and
T = 262144 tokens in total over a mix of long and edge-length sequences.

The quadratic reference holds L x L x H values per sequence (275 GB for W alone in float64 at
L = 32768), so the truth here is the chunked reference (``reference_fwd_vjp(..., chunk=...)``),
which agrees with the quadratic one to 1e-10 wherever both fit (test_reference.py).

GPU memory of that truth (float64, H=32, N=128, P=64, A=32, chunks of REF_CHUNK = 64 tokens),
measured with saved-tensor hooks and peak RSS on the CPU at L = 1024 .. 8192, linear in L:
autograd keeps about 0.45 GiB per 1024 tokens and the peak, backward included, is about
0.63 GiB per 1024 tokens: about 20 GiB for a sequence of 32768 tokens and 41 GiB for 65536.
Allowing 1.5x for the caching allocator, one sequence of 65536 stays under about 62 GB.
All of T = 262144 in one autograd graph would need about 160 GiB (more than the 140 GB of one
H200), so the T = 262144 test runs the reference one sequence at a time, freeing between them,
and writes each sequence's truth into preallocated whole-T float64 tensors. Those hold about
15.5 GB (output, dv and dz are T*H*P*8 bytes = 4.3 GB each, dangles 2.1 GB); the inputs and the
operator's results add about 8 GB, and compare() up to about 9 GB of float64 transients.
Peak: roughly 62 + 15.5 + 8 + 9, under 100 GB.
"""
import pytest
import torch

import mamba3_jit
from mamba3_jit.reference import (ARG_NAMES, COTANGENT_NAMES, DIFF_ARG_NAMES, GLOBAL_RESULTS,
                                  RESULT_DTYPES, RESULT_NAMES, TOKEN_DIM, case_args, compare,
                                  make_case, reference_fwd_vjp)

pytestmark = pytest.mark.gpu

CONFIG = {"variant": "v248"}  # the default: v8's kernels here, every case has a sequence > 4096
REF_CHUNK = 64

# The arguments sliced per token, and along which dimension; q_bias, k_bias and d are shared by
# all sequences, and the final-state cotangents have one row per sequence.
_ARG_TOKEN_DIM = {"q": 1, "k": 1, "v": 1, "adt": 2, "dt": 2, "trap": 2, "angles": 1, "z": 1,
                  "dout": 1}
_SHARED_ARGS = ("q_bias", "k_bias", "d")


def _run(case):
    result = mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(case), config=CONFIG)
    torch.cuda.synchronize()
    return result


def _assert_ok(report, what):
    worst = {n: report["tensors"][n]["rel_l2"] for n in RESULT_NAMES}
    assert report["ok"], f"{what}: {report['failures']} (rel-L2 per tensor: {worst})"


def _free():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def _sequence_case(case, cu, i):
    """Sequence i of a packed case as a case of its own (S = 1, cu_seqlens = [0, L])."""
    a, b = cu[i], cu[i + 1]
    sub = {}
    for name in ARG_NAMES:
        x = case[name]
        if name in _ARG_TOKEN_DIM:
            sub[name] = x.narrow(_ARG_TOKEN_DIM[name], a, b - a)
        elif name in _SHARED_ARGS:
            sub[name] = x
        elif name == "cu_seqlens":
            sub[name] = torch.tensor([0, b - a], dtype=x.dtype, device=x.device)
        else:
            sub[name] = x[i:i + 1]
    return sub


def _result_shapes(case):
    # The shapes the contract gives each result, taken from the inputs rather than from the
    # operator's results, so that a result of the wrong shape cannot shape its own truth.
    like = dict(zip(RESULT_NAMES, COTANGENT_NAMES + DIFF_ARG_NAMES))
    return {n: tuple(case[like[n]].shape) for n in RESULT_NAMES}


def _sequence_slice(result, truth_i, cu, i):
    """The operator's results restricted to sequence i, for compare() against that sequence's
    truth. dq_bias, dk_bias and dd are sums over all sequences with no per-sequence share; they
    are stood in for by the sequence's own truth here and checked on the whole afterwards."""
    a, b = cu[i], cu[i + 1]
    out = []
    for name, x, t in zip(RESULT_NAMES, result, truth_i):
        if name in GLOBAL_RESULTS:
            out.append(t.to(RESULT_DTYPES[name]))
        elif name in TOKEN_DIM:
            out.append(x.narrow(TOKEN_DIM[name], a, b - a))
        else:
            out.append(x[i:i + 1])
    return out


def test_one_sequence_of_32768_tokens(reliability):
    case = make_case([32768], seed=71, device="cuda")
    result = _run(case)
    truth = reference_fwd_vjp(*case_args(case), chunk=REF_CHUNK)
    _assert_ok(compare(result, truth, case["cu_seqlens"]), "L=32768")
    reliability.record("edge_shape", "long-32768")


# The longest sequence is 65536 tokens; 32767, 32768 and 32769 straddle a multiple of the chunk,
# and an empty and a one-token sequence sit between the long ones.
TOTAL_MIX = [65536, 32767, 1, 0, 32769, 40000, 24576, 33727, 32768]


def test_total_262144_tokens_slow(reliability):
    """Slow-ish (tens of seconds: the draw of 2 x 10^9 random numbers on the CPU dominates), but
    part of the default run; ``-k "not slow"`` leaves it out."""
    assert sum(TOTAL_MIX) == 262144
    case = make_case(TOTAL_MIX, seed=72, device="cuda")
    cu = [int(x) for x in case["cu_seqlens"].tolist()]
    result = _run(case)

    shapes = _result_shapes(case)
    truth = [torch.zeros(shapes[n], dtype=torch.float64, device="cuda") for n in RESULT_NAMES]
    for i in range(len(TOTAL_MIX)):
        sub = _sequence_case(case, cu, i)
        truth_i = reference_fwd_vjp(*case_args(sub), chunk=REF_CHUNK)
        _assert_ok(compare(_sequence_slice(result, truth_i, cu, i), truth_i, sub["cu_seqlens"]),
                   f"sequence {i} (L={TOTAL_MIX[i]})")
        a, b = cu[i], cu[i + 1]
        for name, whole, part in zip(RESULT_NAMES, truth, truth_i):
            if name in GLOBAL_RESULTS:
                whole.add_(part)
            elif name in TOKEN_DIM:
                whole.narrow(TOKEN_DIM[name], a, b - a).copy_(part)
            else:
                whole[i:i + 1].copy_(part)
        del sub, truth_i
        _free()

    _assert_ok(compare(result, truth, case["cu_seqlens"]), "T=262144")
    reliability.record("edge_shape", "total-262144")
