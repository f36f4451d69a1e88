"""The shared-memory bank model of the swizzled tiles (methods/bank_model/sw128_banks.py), on the
chunk-64 forward's q/k staging stores: v119's order takes twice the floor, v156's order the floor."""
from bank_models import load_model


def _model():
    return load_model("sw128_banks")


def test_qk_octet_stores_meet_the_floor_only_with_swapped_halves():
    m = _model()
    floor = 64 * 128 * 4 // 128  # one wavefront per 128 bytes of a 64 x 128 fp32 tile
    assert m.qk_octet_store_cost(64, swapped=False) == 2 * floor
    assert m.qk_octet_store_cost(64, swapped=True) == floor


def test_wavefronts_counts_a_bank_shared_by_two_words_twice():
    m = _model()
    spread = [4 * (lane % 8) for lane in range(32)]          # a quarter-warp over 32 banks
    doubled = [4 * (lane % 4) + 32 * ((lane >> 2) & 1) for lane in range(32)]  # two lanes a bank
    assert m.wavefronts(spread, 4) == 4
    assert m.wavefronts(doubled, 4) == 8
