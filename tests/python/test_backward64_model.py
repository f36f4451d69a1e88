"""The float64 model of the chain-free backward the design note proposes
(methods/bank_model/backward64_model.py): the forward's V_j, the state gradient's elementwise
recurrence, independent chunks and scalar carries give autograd's VJP to rounding. It guards the
decomposition the wgmma backward will be written against."""

import pytest
import torch

from mamba3_jit.reference import RESULT_NAMES, case_args, make_case, reference_fwd_vjp
from bank_models import load_model

model = load_model("backward64_model")


@pytest.mark.parametrize("lens,heads,seed", [([150, 33, 64, 1, 0, 97], 2, 5), ([300, 65], 1, 9)])
def test_chain_free_backward_decomposition_is_the_vjp(lens, heads, seed):
    case = make_case(lens, seed=seed, H=heads)
    got = model.backward_model(case)
    truth = dict(zip(RESULT_NAMES, reference_fwd_vjp(*case_args(case))))
    for name, value in got.items():
        assert model.rel(value, truth[name].double()) < 1e-10, name


def test_the_decomposition_needs_the_carried_dc(monkeypatch):
    """The model can fail: without the carries the reverse cumsums stop at each chunk."""
    monkeypatch.setattr(model, "reverse_cumsum_by_chunks",
                        lambda x, chunks: torch.cat([torch.flip(torch.cumsum(torch.flip(x[a:b], [0]), 0), [0])
                                                     for a, b in chunks]))
    case = make_case([150, 33], seed=5, H=1)
    got = model.backward_model(case)
    truth = dict(zip(RESULT_NAMES, reference_fwd_vjp(*case_args(case))))
    assert model.rel(got["dadt"], truth["dadt"].double()) > 1e-3
