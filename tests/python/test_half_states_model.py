"""The thread-by-thread model of v252's half states (methods/bank_model/half_states_model.py): the
forward's half store and the backward's copy and widening give the state rounded in its block's
scale at every input scale, each thread's copy slots are its own, and the 16-byte accesses take one
wavefront a quarter-warp. No GPU: it guards the layout until the device tests run."""

import pytest

from bank_models import load_model

model = load_model("half_states_model")


@pytest.mark.parametrize("scale", [1.0, 2.0 ** 20, 2.0 ** -30])
def test_the_copy_is_the_rounded_state_without_barrier_or_conflicts(scale):
    res = model.check(scale=scale)
    assert res["columns"] and res["exact"], res
    assert res["rel_err"] < 1e-3, res
    assert res["every_word_once"] and res["private_slots"], res
    for name, (waves, minimum) in res["wavefronts"].items():
        assert waves == minimum, (name, waves, minimum)


def test_the_model_sees_conflicts(monkeypatch):
    """With every thread's halves at its columns c + 4 .. c + 7, two threads of a quarter-warp meet on
    each bank: the model counts twice the wavefronts."""
    monkeypatch.setattr(model, "half_state_slot", lambda tid: 4)
    res = model.check()
    assert res["exact"] and res["private_slots"], res
    waves, minimum = res["wavefronts"]["copy"]
    assert waves > minimum
