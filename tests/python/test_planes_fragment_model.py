"""The lane-by-lane model of kernel_src/m3_planes.cuh (methods/bank_model/planes_fragment_model.py):
with the header's own ldmatrix address expressions and the PTX ISA's fragment layouts, every operand
orientation of PlaneTile gives A B, and the padded planes take the conflict-free minimum of
shared-memory wavefronts. No GPU: it guards the block's layout until the device test runs."""

import pytest

from bank_models import load_model

model = load_model("planes_fragment_model")


@pytest.mark.parametrize("shape", [(64, 128, 32), (32, 128, 64), (32, 64, 128)])
def test_every_orientation_gives_the_product_without_bank_conflicts(shape):
    for orientation, (err, wavefronts, minimum) in model.check(*shape).items():
        assert err < 1e-12, (shape, orientation, err)
        assert wavefronts == minimum, (shape, orientation, wavefronts, minimum)


def test_the_addresses_come_from_the_header():
    found = model.header_addresses()
    assert set(found) == {("load_a", True), ("load_a", False), ("load_b_pair", True), ("load_b_pair", False)}
    assert all("lane" in row and "lane" in col for row, col in found.values())


def test_the_check_sees_a_wrong_address(monkeypatch):
    """The model can fail: the transposed A's column offset taken from the plain B's lane split
    gives a wrong product."""
    wrong = dict(model._ADDRESSES)
    row, _ = wrong[("load_a", True)]
    wrong[("load_a", True)] = (row, "m + ((lane >> 4) << 3)")
    monkeypatch.setattr(model, "_ADDRESSES", wrong)
    err, _, _ = model.check(64, 128, 32)[(True, True)]
    assert err > 1e-3


def test_an_unpadded_plane_conflicts(monkeypatch):
    """The wavefront count can fail too: rows exactly 64 bytes apart put ldmatrix rows on shared
    16-byte groups."""
    monkeypatch.setattr(model, "plane_ld", lambda cols: cols)
    _, wavefronts, minimum = model.check(64, 128, 32)[(False, False)]
    assert wavefronts > minimum


def test_the_core_operand_wavefronts_by_warp_tile():
    """The core's operand reads a job: as built, 4 x the 1,072 LDSM its SASS holds a job; 32 x 32
    warp tiles and one read of each plane (a warpgroup product) read less, in that order."""
    built = model.core_as_built_wavefronts()
    assert built == 4 * 1072
    assert model.core_operand_wavefronts(None) < model.core_operand_wavefronts((32, 32)) < built
