"""The training op `mamba3_siso` with initial states.

Most tests run twice: on the GPU with the real kernels, and on the CPU with the native ops
replaced by the float64 reference (cast to the contract dtypes). The CPU run checks the autograd
wiring itself (argument and gradient order, gradients reaching the states, None cotangents,
torch.compile and checkpointing) where no GPU is present; the GPU run checks the same with the
kernels. Fake implementations and argument checks need no kernels at all.
"""
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import mamba3_jit
from mamba3_jit import training
from mamba3_jit import reference as R
from test_initial_states import _segments
from test_training import DIFF, INPUTS, _assert_forward_shapes, _inputs, _leaf_inputs

FINAL_COTANGENTS = ("dfinal_angle", "dfinal_ssm", "dfinal_k", "dfinal_v")
# The dimension that indexes tokens in each per-token input.
TOKEN_INPUT_DIM = {"q": 1, "k": 1, "v": 1, "angles": 1, "z": 1, "adt": 2, "dt": 2, "trap": 2}
SMALL = dict(H=4, N=16, P=8, A=4)


def _with_autograd(fn, *args, **kwargs):
    """Custom op implementations run with autograd's dispatch keys excluded, and the reference
    takes its VJP by autograd: a fresh thread starts from the default dispatch state."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args, **kwargs).result()


def _zeros_for_none(args, cotangents):
    """The reference takes every cotangent; the kernels read a None one as zero."""
    q, v, angles, cu = args[0], args[2], args[8], args[11]
    fa, fs, fk, fv = training._state_shapes(v, q, angles, cu.shape[0] - 1)
    zeros = (torch.zeros_like(v), v.new_zeros(fa), q.new_zeros(fs, dtype=torch.float32),
             q.new_zeros(fk, dtype=torch.float32), v.new_zeros(fv))
    return [z if c is None else c for c, z in zip(cotangents, zeros)]


def _standin_fwd_vjp(*args):
    *args, _config = args
    args = list(args[:12]) + _zeros_for_none(args, args[12:17])
    results = _with_autograd(R.reference_fwd_vjp, *args)
    return [r.to(R.RESULT_DTYPES[n]) for n, r in zip(R.RESULT_NAMES, results)]


def _standin_fwd_vjp_states(*args):
    *args, _config = args
    states = args[17:]
    args = list(args[:12]) + _zeros_for_none(args, args[12:17])
    results = _with_autograd(R.reference_fwd_vjp_with_states, *args, initial_states=states)
    dtypes = [R.RESULT_DTYPES[n] for n in R.RESULT_NAMES] + [s.dtype for s in states]
    return [r.to(dt) for r, dt in zip(results, dtypes)]


def _standin_forward(*args):
    *args, config = args
    return _standin_fwd_vjp(*args, None, None, None, None, None, config)[:5]


def _standin_forward_states(*args):
    *args, config = args
    return _standin_fwd_vjp_states(*args[:12], None, None, None, None, None, *args[12:], config)[:5]


def _replace_native_ops(monkeypatch, fwd_vjp, fwd_vjp_states, forward=None, forward_states=None):
    native = {"fwd_vjp": fwd_vjp, "fwd_vjp_states": fwd_vjp_states, "forward": forward or fwd_vjp,
              "forward_states": forward_states or fwd_vjp_states}
    monkeypatch.setattr(training, "_native_op", native.__getitem__)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request, monkeypatch):
    if request.param == "cpu":
        _replace_native_ops(monkeypatch, _standin_fwd_vjp, _standin_fwd_vjp_states, _standin_forward,
                            _standin_forward_states)
    return request.param


def _random_states(case, seed):
    """States of the contract dtypes; the angles spread over several radians either side of
    zero, i.e. not wrapped into [0, 2pi), as a caller may pass them."""
    g = torch.Generator().manual_seed(seed)
    S, H, A = case["dfinal_angle"].shape
    P, N = case["dfinal_ssm"].shape[2:]
    device = case["q"].device
    return (torch.randn(S, H, A, generator=g).mul(3).to(torch.bfloat16).to(device),
            torch.randn(S, H, P, N, generator=g).mul(0.1).to(device),
            torch.randn(S, H, N, generator=g).to(device),
            torch.randn(S, H, P, generator=g).to(torch.bfloat16).to(device))


def _state_leaves(states):
    return [s.clone().requires_grad_(True) for s in states]


def _cotangents(case):
    return [case[n] for n in ("dout",) + FINAL_COTANGENTS]


def _rel_l2(x, y):
    x, y = x.double(), y.double()
    return ((x - y).norm() / y.norm().clamp_min(1e-30)).item()


# ------------------------------------------------------------------------------------------------
# Fake implementations (no kernels)
# ------------------------------------------------------------------------------------------------

def test_fake_forward_with_states_gives_shapes_and_dtypes():
    case = R.make_case([5, 0, 3], seed=1)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in _inputs(case)]
        states = [mode.from_tensor(t) for t in _random_states(case, 1)]
        out, finals = mamba3_jit.mamba3_siso(*fake, initial_states=tuple(states), return_final_states=True)
    _assert_forward_shapes(out, finals, T=8, S=3)


def test_fake_backward_with_states_gives_shapes_and_dtypes():
    case = R.make_case([4, 7], seed=2)
    states = _random_states(case, 2)
    with FakeTensorMode() as mode:
        args = [mode.from_tensor(case[n]) for n in R.ARG_NAMES] + [mode.from_tensor(s) for s in states]
        grads = torch.ops.mamba3_jit.siso_backward_states(*args)
    wants = [case[n] for n in DIFF] + list(states)
    assert len(grads) == 15
    for g, want in zip(grads, wants):
        assert (g.shape, g.dtype) == (want.shape, want.dtype)


def test_fake_autograd_reaches_every_input_and_state():
    # loss.backward() under fake tensors runs the autograd formula with the fake backward op.
    case = R.make_case([6, 0, 9], seed=3)
    with FakeTensorMode() as mode:
        leaves = [mode.from_tensor(t).requires_grad_(n in DIFF) for n, t in zip(INPUTS, _inputs(case))]
        states = [mode.from_tensor(s).requires_grad_(True) for s in _random_states(case, 3)]
        out, final = mamba3_jit.mamba3_siso(*leaves, initial_states=states, return_final_states=True)
        (out.float().sum() + final[1].sum()).backward()
        for x in leaves[:11] + states:
            assert x.grad is not None and (x.grad.shape, x.grad.dtype) == (x.shape, x.dtype)


# ------------------------------------------------------------------------------------------------
# Argument checks of initial_states (before anything is launched)
# ------------------------------------------------------------------------------------------------

def _bad_states(states):
    angle, ssm, k, v = states
    return {
        "not a tuple": (angle, TypeError, r"None or a tuple of 4 tensors .*got Tensor"),
        "three tensors": ((angle, ssm, k), ValueError, r"4 tensors \(angle, ssm, k, v\), got 3"),
        "five tensors": ((angle, ssm, k, v, v), ValueError, r"4 tensors .*got 5"),
        "None state": ((angle, ssm, None, v), TypeError,
                       r"initial_states\[2\] \(k state\) must be a tensor, got NoneType"),
        "fp32 angle": ((angle.float(), ssm, k, v), TypeError,
                       r"initial_states\[0\] \(angle state\) expected dtype torch.bfloat16, "
                       r"got torch.float32"),
        "bf16 ssm": ((angle, ssm.bfloat16(), k, v), TypeError,
                     r"initial_states\[1\] \(ssm state\) expected dtype torch.float32, got torch.bfloat16"),
        "fp32 v": ((angle, ssm, k, v.float()), TypeError, r"initial_states\[3\] \(v state\) expected dtype"),
        "transposed ssm": ((angle, ssm.mT.contiguous(), k, v), ValueError,
                           r"initial_states\[1\] \(ssm state\) expected shape \(S, H, P, N\) = "
                           r"\(2, 32, 64, 128\), got \(2, 32, 128, 64\)"),
        "one row too many": ((angle, ssm, torch.cat((k, k[:1])), v), ValueError,
                             r"initial_states\[2\] \(k state\) expected shape \(S, H, N\) = "
                             r"\(2, 32, 128\), got \(3, 32, 128\)"),
        "states of another sequence count": ((angle[:1], ssm[:1], k[:1], v[:1]), ValueError,
                                             r"initial_states\[0\] \(angle state\) expected shape"),
        "other device": ((angle, ssm, k, v.to("meta")), ValueError,
                         r"initial_states\[3\] \(v state\) expected device cpu \(the device of q\), "
                         r"got meta"),
    }


BAD_STATE_LABELS = tuple(_bad_states((torch.zeros(2, 2, 2, 2),) * 4))


def _refuse_launch(*args):
    raise AssertionError("a kernel was launched")


@pytest.mark.parametrize("label", BAD_STATE_LABELS)
def test_bad_initial_states_are_refused_before_launch(label, monkeypatch, reliability):
    _replace_native_ops(monkeypatch, _refuse_launch, _refuse_launch)
    case = R.make_case([3, 5], seed=4)
    states, error, message = _bad_states(_random_states(case, 4))[label]
    with pytest.raises(error, match=message):
        mamba3_jit.mamba3_siso(*_inputs(case), initial_states=states)
    reliability.record("bad_input", f"training op initial_states: {label}")


@pytest.mark.parametrize("as_list", [False, True])
def test_good_initial_states_reach_the_states_op(as_list, monkeypatch):
    calls = []

    def record(*args):
        calls.append(args)
        return _standin_forward_states(*args)

    # The forward is the forward-only op: the joint kernels must not run.
    _replace_native_ops(monkeypatch, _refuse_launch, _refuse_launch, _refuse_launch, record)
    case = R.make_case([3, 0, 5], seed=5)
    states = _random_states(case, 5)
    out = mamba3_jit.mamba3_siso(*_inputs(case), initial_states=list(states) if as_list else states)
    assert out.shape == case["v"].shape and len(calls) == 1
    # The states follow the 12 inputs, in order, and the config asks for the default variant.
    assert all(a is b for a, b in zip(calls[0][12:16], states)) and calls[0][16] == ""


def test_valid_states_on_cpu_inputs_meet_the_native_device_check():
    # With the real library, the first complaint about CPU inputs comes from the native op, so
    # the Python checks let valid states through unchanged.
    case = R.make_case([4], seed=6)
    with pytest.raises(ValueError, match="expected a CUDA tensor"):
        mamba3_jit.mamba3_siso(*_inputs(case), initial_states=_random_states(case, 6))


# ------------------------------------------------------------------------------------------------
# Autograd: CPU stand-in and GPU kernels
# ------------------------------------------------------------------------------------------------

def _segment_inputs(leaves, idx, seg_cu):
    """The differentiable slices of a segment of every sequence: autograd sums each segment's
    gradients back into the whole case's leaves."""
    sliced = [leaf.index_select(TOKEN_INPUT_DIM[n], idx) if n in TOKEN_INPUT_DIM else leaf
              for n, leaf in zip(DIFF, leaves)]
    return sliced + [seg_cu]


@pytest.mark.parametrize("from_states", [False, True], ids=["zero-start", "from-states"])
def test_two_calls_handing_states_on_equal_one_call(device, from_states):
    """Every one of 3 packed sequences cut at its own point (a chunk boundary, mid-way, before the
    last token); the second call starts from the first call's final states and its state
    gradients flow back into the first call."""
    case = R.make_case([150, 97, 70], seed=7, device=device)
    cuts = [[64], [40], [69]]
    init = _random_states(case, 7) if from_states else None
    cot = _cotangents(case)

    leaves = _leaf_inputs(case)
    init_leaves = _state_leaves(init) if from_states else None
    out, final = mamba3_jit.mamba3_siso(*leaves, initial_states=init_leaves, return_final_states=True)
    torch.autograd.backward([out, *final], cot)
    whole = [out, *final] + [x.grad for x in leaves[:11]]
    # Two all-zero results would pass the comparison below.
    for name, x in zip(R.RESULT_NAMES, whole):
        assert x.double().norm() > 0, f"{name} of the one call is all zero"

    leaves = _leaf_inputs(case)
    init_leaves_2 = _state_leaves(init) if from_states else None
    (idx1, cu1), (idx2, cu2) = [(i.to(device), c.to(device)) for i, c in _segments(case, cuts)]
    out1, mid = mamba3_jit.mamba3_siso(*_segment_inputs(leaves, idx1, cu1), initial_states=init_leaves_2,
                                       return_final_states=True)
    out2, final = mamba3_jit.mamba3_siso(*_segment_inputs(leaves, idx2, cu2), initial_states=mid,
                                         return_final_states=True)
    out = torch.zeros_like(case["v"]).index_copy(1, idx1, out1).index_copy(1, idx2, out2)
    torch.autograd.backward([out, *final], cot)
    split = [out, *final] + [x.grad for x in leaves[:11]]

    report = R.compare(split, whole, case["cu_seqlens"])
    assert report["ok"], report["failures"]
    if from_states:
        for name, a, b in zip(R.INITIAL_GRAD_NAMES, init_leaves_2, init_leaves):
            err = _rel_l2(a.grad, b.grad)
            assert err <= R.REL_L2_TOL, f"{name}: rel-L2 {err:.2e}"


@pytest.mark.parametrize("cotangents", ["all", "output only"])
def test_backward_is_bitwise_the_joint_vjp_with_states(device, cotangents):
    case = R.make_case([129, 150, 0, 64], seed=8, device=device)
    states = _random_states(case, 8)
    leaves = _leaf_inputs(case)
    state_leaves = _state_leaves(states)
    out, final = mamba3_jit.mamba3_siso(*leaves, initial_states=state_leaves, return_final_states=True)
    args = dict(zip(R.ARG_NAMES, R.case_args(case)))
    if cotangents == "all":
        torch.autograd.backward([out, *final], _cotangents(case))
    else:
        # The final states get no cotangent (None in the autograd formula); zeros for the joint op.
        (out.float() * case["dout"].float()).sum().backward()
        args.update({n: torch.zeros_like(args[n]) for n in FINAL_COTANGENTS})
    if device == "cuda":
        joint = mamba3_jit.fwd_vjp_with_states(*args.values(), initial_states=states)
    else:
        joint = _standin_fwd_vjp_states(*args.values(), *states, "")
    named = dict(zip(R.RESULT_WITH_STATES_NAMES, joint))
    for name, x in zip(R.FORWARD_NAMES, (out, *final)):
        assert torch.equal(x, named[name]), f"{name} differs from the joint op"
    for name, leaf in zip(DIFF, leaves):
        assert torch.equal(leaf.grad, named["d" + name]), f"gradient of {name} differs from the joint VJP"
    for name, leaf in zip(R.INITIAL_GRAD_NAMES, state_leaves):
        assert torch.equal(leaf.grad, named[name]), f"{name} differs from the joint VJP"


def _with_states(*args):
    out, final = mamba3_jit.mamba3_siso(*args[:12], initial_states=args[12:], return_final_states=True)
    return (out, *final)


def test_checkpoint_with_states_gives_the_same_gradients(device):
    case = R.make_case([100, 31], seed=9, device=device)
    states = _random_states(case, 9)
    grads = []
    for checkpointed in (False, True):
        leaves = _leaf_inputs(case) + _state_leaves(states)
        if checkpointed:
            results = torch.utils.checkpoint.checkpoint(_with_states, *leaves, use_reentrant=False)
        else:
            results = _with_states(*leaves)
        torch.autograd.backward(results, _cotangents(case))
        grads.append([x.grad for x in leaves if x.requires_grad])
    assert len(grads[0]) == len(grads[1]) == 15
    for name, a, b in zip(DIFF + R.INITIAL_GRAD_NAMES, *grads):
        assert torch.equal(a, b), f"gradient of {name} differs under checkpointing"


def test_torch_compile_fullgraph_with_states(device):
    case = R.make_case([70, 9, 0], seed=10, device=device)
    states = _random_states(case, 10)

    class Block(torch.nn.Module):
        """A chained pair of calls: the second starts from the first's final states."""

        def forward(self, *args):
            inputs, init = args[:12], args[12:]
            out, mid = mamba3_jit.mamba3_siso(*inputs, initial_states=init, return_final_states=True)
            out2, final = mamba3_jit.mamba3_siso(*inputs, initial_states=mid, return_final_states=True)
            return (out.float() ** 2).mean() + (out2.float() ** 2).mean() + final[1].square().mean()

    torch._dynamo.reset()
    block = Block()
    # No C++ compiler is needed on the CPU: there aot_eager traces the same joint graph.
    compiled = torch.compile(block, fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager")
    leaves = _leaf_inputs(case) + _state_leaves(states)
    loss = compiled(*leaves)
    loss.backward()
    leaves_eager = _leaf_inputs(case) + _state_leaves(states)
    loss_eager = block(*leaves_eager)
    loss_eager.backward()
    assert torch.allclose(loss, loss_eager, rtol=1e-4)
    # Relative L2 rather than an absolute tolerance: these gradients are small (the loss is a
    # mean), and compiled code may round the cotangents differently.
    names = DIFF + R.INITIAL_GRAD_NAMES
    grads = [(a.grad, b.grad) for a, b in zip(leaves, leaves_eager) if b.grad is not None]
    assert len(grads) == len(names)
    for name, (a, b) in zip(names, grads):
        assert a is not None and _rel_l2(a, b) <= 1e-2, f"gradient of {name} differs when compiled"


def test_opcheck_with_states(device):
    case = R.make_case([40, 3], seed=11, device=device, **({} if device == "cuda" else SMALL))
    states = _random_states(case, 11)
    inputs = tuple(_inputs(case))
    torch.library.opcheck(torch.ops.mamba3_jit.siso_forward_states.default, inputs + states,
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.mamba3_jit.siso_backward_states.default,
                          inputs + tuple(_cotangents(case)) + states,
                          test_utils=("test_schema", "test_faketensor"))


def test_zero_states_match_no_states(device):
    # The stateless op and the states op with all-zero states compute the same layer.
    case = R.make_case([129, 1, 64], seed=12, device=device)
    zeros = tuple(torch.zeros_like(s) for s in _random_states(case, 12))
    out, final = mamba3_jit.mamba3_siso(*_inputs(case), return_final_states=True)
    out0, final0 = mamba3_jit.mamba3_siso(*_inputs(case), initial_states=zeros, return_final_states=True)
    for name, a, b in zip(R.FORWARD_NAMES, (out0, *final0), (out, *final)):
        err = R.rel_l2(a, b, name == "final_angle_state")[0]
        assert err <= R.REL_L2_TOL, f"{name}: rel-L2 {err:.2e}"


def test_none_cotangents_reach_the_kernels_as_none(monkeypatch):
    """Autograd's None cotangents are passed on as None (null pointers the kernels read as zero):
    no zero tensors are made for them, and the forward runs the forward-only op."""
    calls = []

    def record(*args):
        calls.append(args)
        return _standin_fwd_vjp(*args)

    _replace_native_ops(monkeypatch, record, _refuse_launch, _standin_forward, _refuse_launch)
    case = R.make_case([5, 3], seed=6)
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in _inputs(case)]
    out, (fa, fs, fk, fv) = mamba3_jit.mamba3_siso(*leaves, return_final_states=True)
    out.float().sum().backward()
    assert len(calls) == 1
    assert calls[0][12] is not None and all(c is None for c in calls[0][13:17])

    calls.clear()
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in _inputs(case)]
    out, (fa, fs, fk, fv) = mamba3_jit.mamba3_siso(*leaves, return_final_states=True)
    fs.sum().backward()
    assert len(calls) == 1
    given = [c is not None for c in calls[0][12:17]]
    assert given == [False, False, True, False, False]
