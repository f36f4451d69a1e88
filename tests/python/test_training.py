"""The training op `mamba3_siso` without initial states: fake implementation and argument errors on
the CPU; parity with the joint VJP, torch.compile and checkpointing on the GPU. The same with
initial states is in test_training_states.py."""
import importlib.util
import subprocess
import sys
from pathlib import Path

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
        out, finals = mamba3_jit.mamba3_siso(*fake, return_final_states=True)
    _assert_forward_shapes(out, finals, T=8, S=3)


def _assert_forward_shapes(out, finals, T, S, H=32, N=128, P=64, A=32):
    """The output and the four final states have the contract's shapes and dtypes."""
    fa, fs, fk, fv = finals
    assert (out.shape, out.dtype) == ((1, T, H, P), torch.bfloat16)
    assert (fa.shape, fa.dtype) == ((S, H, A), torch.bfloat16)
    assert (fs.shape, fs.dtype) == ((S, H, P, N), torch.float32)
    assert (fk.shape, fk.dtype) == ((S, H, N), torch.float32)
    assert (fv.shape, fv.dtype) == ((S, H, P), torch.bfloat16)


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


# ------------------------------------------------------------------------------------------------
# examples/train_tiny.py: only what is cheap on the CPU; its training needs a GPU
# ------------------------------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"


def _run_example(*args):
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                          timeout=300)


def test_example_help_lists_its_options():
    proc = _run_example("--help")
    assert proc.returncode == 0, proc.stderr
    for option in ("--steps", "--device", "--seed", "--segments"):
        assert option in proc.stdout


def test_example_refuses_a_non_cuda_device_clearly():
    proc = _run_example("--device", "cpu", "--steps", "1")
    assert proc.returncode != 0
    assert "needs a CUDA device" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("train_tiny", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_batches_cover_every_token_once_in_order(example):
    gen = torch.Generator().manual_seed(0)
    x, target, segments = example.make_batch(3, 5, 9, 3, gen, "cpu")
    T = x.shape[0]
    assert target.shape == x.shape
    idx = torch.cat([i for i, _ in segments])
    assert torch.equal(idx.sort().values, torch.arange(T))
    for i, cu in segments:
        assert cu.dtype == torch.int32 and len(cu) == 4 and int(cu[-1]) == len(i)
    # Each sequence's pieces are consecutive token runs, the later call taking the later piece.
    starts = [i[cu[:-1].long()] for i, cu in segments]
    for a, b in zip(starts, starts[1:]):
        assert bool((a < b).all())


def test_example_block_runs_in_pieces_as_in_one_call(example):
    # With the float32 eager layer, handing the states on between calls continues the layer
    # exactly, so the prediction does not depend on the number of calls.
    torch.manual_seed(0)
    model = example.TinyMamba3()
    gen = torch.Generator().manual_seed(1)
    x, _, one = example.make_batch(2, 20, 30, 1, gen, "cpu")
    gen = torch.Generator().manual_seed(1)
    _, _, two = example.make_batch(2, 20, 30, 2, gen, "cpu")
    with torch.no_grad():
        a = model(x, one, example.eager_layer)
        b = model(x, two, example.eager_layer)
    assert a.shape == x.shape and bool(torch.isfinite(a).all())
    assert torch.allclose(a, b, rtol=1e-3, atol=1e-4)
