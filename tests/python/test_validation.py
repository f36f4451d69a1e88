"""Argument checking of the operator, on the CPU: every rejection names the argument, what was
expected and what was given, and leaves the inputs untouched."""
import pytest
import torch

import mamba3_jit
from mamba3_jit.reference import ARG_NAMES, case_args, make_case

SEQ_LENS = [5, 0, 3]


@pytest.fixture()
def case():
    return make_case(SEQ_LENS, seed=7)


def _args(case, **replace):
    return tuple(replace.get(n, case[n]) for n in ARG_NAMES)


def _expect(exc, args, *fragments, require_cuda=False):
    snapshot = [a.clone() for a in args]
    with pytest.raises(exc) as info:
        mamba3_jit.validate(*args, require_cuda=require_cuda)
    msg = str(info.value)
    for frag in fragments:
        assert frag in msg, f"{frag!r} not in {msg!r}"
    for before, after in zip(snapshot, args):
        assert torch.equal(before, after)
    return msg


def test_valid_case_passes(case):
    mamba3_jit.validate(*case_args(case), require_cuda=False)


@pytest.mark.parametrize("name", ARG_NAMES)
def test_wrong_dtype_is_a_type_error(case, name, reliability):
    t = case[name]
    wrong = torch.float64 if t.dtype != torch.float64 else torch.float32
    if name == "cu_seqlens":
        wrong = torch.int64
    _expect(TypeError, _args(case, **{name: t.to(wrong)}), f"'{name}'", "expected dtype", "got")
    reliability.record("bad_input", f"wrong dtype of {name}")


def test_cpu_tensors_rejected_when_cuda_required(case, reliability):
    _expect(ValueError, case_args(case), "'q'", "expected a CUDA tensor", "cpu", require_cuda=True)
    reliability.record("bad_input", "CPU tensors where CUDA is required")


def test_operator_rejects_cpu_inputs_before_any_launch(case, reliability):
    args = case_args(case)
    snapshot = [a.clone() for a in args]
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*args)
    for before, after in zip(snapshot, args):
        assert torch.equal(before, after)
    reliability.record("bad_input", "CPU tensors passed to the operator")


def test_bound_operator_checks_as_the_operator_does(case, reliability):
    """mamba3_jit.bind fixes the config's text once; its calls are checked like the operator's."""
    bound = mamba3_jit.bind({"variant": "v248", "chunk": 32, "threads": 256})
    assert bound.config == "variant=v248,chunk=32,threads=256"
    args = case_args(case)
    snapshot = [a.clone() for a in args]
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        bound(*args)
    with pytest.raises(ValueError, match="v999"):
        mamba3_jit.bind("variant=v999")(*args)
    for before, after in zip(snapshot, args):
        assert torch.equal(before, after)
    reliability.record("bad_input", "CPU tensors passed to the bound operator")


@pytest.mark.parametrize("name", ["k", "v", "adt", "dt", "trap", "q_bias", "k_bias", "angles", "d", "z",
                                  "dout", "dfinal_angle", "dfinal_ssm", "dfinal_k", "dfinal_v"])
def test_shape_mismatch_names_the_argument(case, name, reliability):
    t = case[name]
    bad = torch.cat([t, t], dim=0).contiguous()
    _expect(ValueError, _args(case, **{name: bad}), f"'{name}'", "expected shape", "got")
    reliability.record("bad_input", f"wrong shape of {name}")


@pytest.mark.parametrize("dim,label", [(1, "T"), (3, "N")])
def test_q_dims_propagate(case, dim, label, reliability):
    # Growing T or N on q alone makes every other argument disagree with it.
    q = case["q"]
    bad = torch.cat([q, q.narrow(dim, 0, 1)], dim=dim).contiguous()
    _expect(ValueError, _args(case, q=bad), "expected shape")
    reliability.record("bad_input", f"q's {label} disagreeing with the other arguments")


def test_unsupported_head_dims(case, reliability):
    small = make_case(SEQ_LENS, seed=7, H=2, N=16, P=8, A=4)
    _expect(ValueError, case_args(small), "unsupported head dims", "N=16")
    reliability.record("bad_input", "unsupported head dims")


def test_non_contiguous_rejected(case, reliability):
    v = case["v"]
    strided = torch.empty(v.shape[:-1] + (2 * v.shape[-1],), dtype=v.dtype)[..., ::2]
    strided.copy_(v)
    _expect(ValueError, _args(case, v=strided), "'v'", "contiguous")
    reliability.record("bad_input", "non-contiguous tensor")


def test_misaligned_view_rejected(case, reliability):
    v = case["v"]
    flat = torch.empty(v.numel() + 1, dtype=v.dtype)
    shifted = flat[1:].view(v.shape)
    shifted.copy_(v)
    assert shifted.is_contiguous()
    _expect(ValueError, _args(case, v=shifted), "'v'", "16-byte aligned")
    reliability.record("bad_input", "misaligned view")


def test_mixed_devices_rejected(case, reliability):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device for a second device type")
    _expect(ValueError, _args(case, d=case["d"].cuda()), "'d'", "expected device")
    reliability.record("bad_input", "tensors on mixed devices")


@pytest.mark.parametrize("values,fragment", [
    ([1, 5, 5, 8], "cu_seqlens[0] = 0"),
    ([0, 5, 4, 8], "must not decrease"),
    ([0, 5, 5, 9], "cu_seqlens[S] = T"),
])
def test_bad_cu_seqlens_values(case, values, fragment, reliability):
    cu = torch.tensor(values, dtype=torch.int32)
    _expect(ValueError, _args(case, cu_seqlens=cu), "'cu_seqlens'", fragment)
    reliability.record("bad_input", f"cu_seqlens violating '{fragment}'")


def test_cu_seqlens_length_must_match_state_cotangents(case, reliability):
    cu = torch.tensor([0, 5, 8], dtype=torch.int32)
    _expect(ValueError, _args(case, cu_seqlens=cu), "'dfinal_angle'", "(S, H, A)")
    reliability.record("bad_input", "cu_seqlens length disagreeing with the state cotangents")


def test_unknown_config_rejected(case, reliability):
    with pytest.raises(ValueError, match="config"):
        mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(case), config={"variant": "v9999"})
    reliability.record("bad_input", "unknown config variant")


def test_specializations_listed():
    names = mamba3_jit.specializations("sm_90a")
    assert any(n.startswith("m3_chunk_scan[v1,") for n in names)
    assert any(n.startswith("m3_chunk_scan[v2,") for n in names)
    assert any(n.startswith("m3_chunk_scan[v4,") for n in names)
    assert any(n.startswith("m3_reduce") for n in names)
