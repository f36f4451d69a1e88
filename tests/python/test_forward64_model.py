"""The CPU model of v119's forward job (methods/bank_model/forward64_model.py) against the float64
reference: the kernel's index scheme (swizzled tiles read through wgmma descriptors at sub-tile
offsets, fragment layouts, KS^T's permuted rows, the quad shuffle transpose, the y tiles' XOR, the
job table's round order and the chain's slots and flags, all inside the workspace) gives the right
outputs, final states and the states the backward reads. No GPU: it guards the scheme while the kernel is changed; the GPU tests
check the kernel itself."""
import importlib.util
from pathlib import Path

import pytest

from mamba3_jit.reference import case_args, make_case, reference_fwd_vjp

_PATH = Path(__file__).resolve().parents[2] / "methods" / "bank_model" / "forward64_model.py"
_spec = importlib.util.spec_from_file_location("forward64_model", _PATH)
model = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model)


# [65]: the sequence's chunks fill the workspace's capacity (T / 32 + S), so a slot past the last
# chunk is outside it (the model asserts every workspace slot and flag a job touches is inside).
@pytest.mark.parametrize("lens,heads,seed", [([150, 33, 64, 1, 0, 97], 2, 7), ([300, 65], 1, 3), ([65], 1, 5)])
def test_forward64_scheme_matches_the_reference(lens, heads, seed):
    case = make_case(lens, seed=seed, H=heads)
    out, ws_states, chunk_base = model.model_forward(case)
    truth = reference_fwd_vjp(*case_args(case))
    nonempty = [i for i, n in enumerate(lens) if n > 0]
    pairs = {"output": (out["output"], truth[0][0]), "dz": (out["dz"], truth[15][0]),
             "final_ssm": (out["final_ssm"][nonempty], truth[2][nonempty]),
             "final_k": (out["final_k"][nonempty], truth[3][nonempty]),
             "final_v": (out["final_v"][nonempty], truth[4][nonempty])}
    for name, (got, want) in pairs.items():
        # tf32 operands: about 1e-3 (methods/results/precision); index slips give O(1).
        assert model.rel(got, want.double().numpy()) < 5e-3, name
    ref_states = model.reference_states(case, chunk_base)
    assert set(ws_states) == set(ref_states)
    for key, want in ref_states.items():
        assert model.rel(ws_states[key], want.numpy()) < 5e-3, key


def test_forward64_model_detects_a_wrong_permutation(monkeypatch):
    """The model can fail: with KS^T's rows unpermuted the register operand meets the wrong
    state columns."""
    monkeypatch.setattr(model, "permuted_column", lambda n: n)
    case = make_case([150, 33], seed=7, H=1)
    out, _, _ = model.model_forward(case)
    truth = reference_fwd_vjp(*case_args(case))
    assert model.rel(out["output"], truth[0][0].double().numpy()) > 0.1
