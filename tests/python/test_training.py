"""The training op `mamba3_siso`: fake implementation and argument errors on the CPU; parity with
the joint VJP, torch.compile and checkpointing on the GPU."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import mamba3_jit
from mamba3_jit.reference import ARG_NAMES, RESULT_NAMES, case_args, make_case

INPUTS = ARG_NAMES[:12]
DIFF = ARG_NAMES[:11]


def _inputs(case):
    return [case[n] for n in INPUTS]


def test_fake_implementation_gives_shapes_and_dtypes():
    case = make_case([5, 0, 3], seed=1)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in _inputs(case)]
        out, (fa, fs, fk, fv) = mamba3_jit.mamba3_siso(*fake, return_final_states=True)
    T, S, H, N, P, A = 8, 3, 32, 128, 64, 32
    assert (out.shape, out.dtype) == ((1, T, H, P), torch.bfloat16)
    assert (fa.shape, fa.dtype) == ((S, H, A), torch.bfloat16)
    assert (fs.shape, fs.dtype) == ((S, H, P, N), torch.float32)
    assert (fk.shape, fk.dtype) == ((S, H, N), torch.float32)
    assert (fv.shape, fv.dtype) == ((S, H, P), torch.bfloat16)


def test_initial_states_are_refused_clearly():
    case = make_case([4], seed=2)
    with pytest.raises(NotImplementedError, match="initial_states"):
        mamba3_jit.mamba3_siso(*_inputs(case), initial_states=(None, None, None, None))


def test_cpu_inputs_raise_a_value_error():
    case = make_case([4], seed=3)
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        mamba3_jit.mamba3_siso(*_inputs(case))


def _leaf_inputs(case):
    leaves = []
    for n in INPUTS:
        t = case[n].clone()
        if n in DIFF:
            t.requires_grad_(True)
        leaves.append(t)
    return leaves


@pytest.mark.gpu
def test_backward_is_bitwise_the_joint_vjp():
    case = make_case([129, 150, 0, 64], seed=4, device="cuda")
    leaves = _leaf_inputs(case)
    out, states = mamba3_jit.mamba3_siso(*leaves, return_final_states=True)
    cot = [case[n] for n in ("dout", "dfinal_angle", "dfinal_ssm", "dfinal_k", "dfinal_v")]
    torch.autograd.backward([out, *states], cot)
    joint = mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(case))
    named = dict(zip(RESULT_NAMES, joint))
    assert torch.equal(out, named["output"])
    for name, leaf in zip(INPUTS, leaves):
        if name in DIFF:
            assert torch.equal(leaf.grad, named["d" + name]), f"gradient of {name} differs from the joint VJP"


@pytest.mark.gpu
def test_output_only_loss_and_checkpoint():
    case = make_case([100, 31], seed=5, device="cuda")
    leaves = _leaf_inputs(case)
    out = mamba3_jit.mamba3_siso(*leaves)
    (out.float() * case["dout"].float()).sum().backward()
    plain = [leaf.grad.clone() for leaf in leaves if leaf.grad is not None]
    leaves2 = _leaf_inputs(case)
    out2 = torch.utils.checkpoint.checkpoint(mamba3_jit.mamba3_siso, *leaves2, use_reentrant=False)
    (out2.float() * case["dout"].float()).sum().backward()
    again = [leaf.grad for leaf in leaves2 if leaf.grad is not None]
    assert len(plain) == len(again) == len(DIFF)
    for a, b in zip(plain, again):
        assert torch.equal(a, b)


@pytest.mark.gpu
def test_torch_compile_fullgraph():
    case = make_case([70, 9], seed=6, device="cuda")

    class Block(torch.nn.Module):
        def forward(self, *inputs):
            out = mamba3_jit.mamba3_siso(*inputs)
            return (out.float() ** 2).mean()

    block = Block()
    compiled = torch.compile(block, fullgraph=True)
    leaves = _leaf_inputs(case)
    loss = compiled(*leaves)
    loss.backward()
    leaves_eager = _leaf_inputs(case)
    loss_eager = block(*leaves_eager)
    loss_eager.backward()
    assert torch.allclose(loss, loss_eager)
    for a, b in zip(leaves, leaves_eager):
        if a.grad is not None:
            assert torch.allclose(a.grad.float(), b.grad.float(), rtol=1e-2, atol=1e-3)


@pytest.mark.gpu
def test_opcheck():
    case = make_case([40, 3], seed=7, device="cuda")
    torch.library.opcheck(torch.ops.mamba3_jit.siso_forward.default, tuple(_inputs(case)),
                          test_utils=("test_schema", "test_faketensor"))
