"""The CPU model of v123's k/v-side backward job (methods/bank_model/backward64kv_model.py) against
the float64 decomposition of backward64_model.py: the kernel's index scheme (tickets after the
forward's, each sequence's jobs in reverse; e dy^T's permuted rows that leave G^T in the register
operand's order; the chain's hand-off through the even-chunk flags, each raised once and waited on
only once raised; the transposed scores' and G tiles; the dk, partial and dv slots, each written
once) gives every token's per-head dk, every chunk's dk_bias partial and dv. No GPU: it guards the
scheme while the kernel is changed; the GPU tests check the kernel itself."""

import pytest

from mamba3_jit.reference import make_case
from bank_models import load_model

model = load_model("backward64kv_model")


# Empty, one-token, 63/64/65-token and multi-job sequences (chains of up to three jobs); [65] fills
# the workspace's capacity.
@pytest.mark.parametrize("lens,heads,seed", [([150, 33, 64, 1, 0, 97], 2, 7), ([65], 1, 5), ([2, 130, 63], 1, 3)])
def test_backward64kv_scheme_matches_the_decomposition(lens, heads, seed):
    e_dkh, e_partials, e_dv = model.compare(make_case(lens, seed=seed, H=heads))
    # tf32 operands: about 1e-3 (methods/results/precision); index slips give O(1).
    assert max(e_dkh, e_partials, e_dv) < 5e-3, (e_dkh, e_partials, e_dv)


def test_backward64kv_model_detects_unpermuted_value_rows(monkeypatch):
    """The model can fail: with e dy^T's rows in plain order, G^T's registers are not the register
    operand's (i, i + 4) pairs and dk and dv go wrong."""
    monkeypatch.setattr(model, "permuted_p", lambda p: p)
    e_dkh, _, e_dv = model.compare(make_case([150, 33], seed=7, H=1))
    assert e_dkh > 0.1 and e_dv > 0.1
