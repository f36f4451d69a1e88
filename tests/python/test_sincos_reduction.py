"""The rotary sin/cos's argument reduction (kernel_src/m3_common.cuh, m3_sincos's fast path), modelled
in float32 on the CPU with its constants read from the kernel source: k = rint(x / 2 pi), then x less
k times a two-part 2 pi by fused multiply-adds. M3_SINCOS_WIDE (v213) takes that path for every
angle instead of calling sincosf past 8192 rad, on the strength of the bounds checked here: the
reduced angle's sine within 2e-7 of sin(x) (float64) up to 1e7 rad, within 5e-7 up to 1e8 rad.
k's own rounding (x / 2 pi in float32) leaves the reduced angle past pi by up to about 0.8 rad at
1e7 and 2 pi at 1e8; the hardware's sin/cos of such an argument is the GPU tests' to check."""
import re
from pathlib import Path

import numpy as np
import pytest

_SOURCE = (Path(__file__).resolve().parents[2] / "kernel_src" / "m3_common.cuh").read_text()
_F32 = r"([-+0-9.e]+)f"


def _constants():
    inv_two_pi = re.search(r"rintf\(x \* " + _F32 + r"\)", _SOURCE)
    parts = re.search(r"fmaf\(-k, " + _F32 + r", fmaf\(-k, " + _F32 + r", x\)\)", _SOURCE)
    assert inv_two_pi and parts, "m3_sincos's reduction is no longer spelled as this model reads it"
    return np.float32(inv_two_pi.group(1)), np.float32(parts.group(2)), np.float32(parts.group(1))


def _fma32(a, b, c):
    # A float32 product is exact in float64 and these sums are near-cancelling: one rounding to
    # float32, as the fused multiply-add's.
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def _reduced(x):
    inv_two_pi, hi, lo = _constants()
    k = np.rint((x * inv_two_pi).astype(np.float32))
    return _fma32(-k, np.full_like(x, lo), _fma32(-k, np.full_like(x, hi), x))


def test_the_two_parts_make_two_pi():
    _, hi, lo = _constants()
    assert abs(float(hi) + float(lo) - 2 * np.pi) < 1e-14


@pytest.mark.parametrize("scale,bound,reach", [(1e3, 2e-7, np.pi + 1e-4), (8192.0, 2e-7, np.pi + 1e-3),
                                               (1e5, 2e-7, np.pi + 0.01), (1e7, 2e-7, 4.0), (1e8, 5e-7, 3 * np.pi)])
def test_reduction_keeps_the_sine_up_to_1e8_rad(scale, bound, reach):
    x = ((np.random.default_rng(int(scale)).random(200_000) * 2 - 1) * scale).astype(np.float32)
    r = _reduced(x)
    assert np.abs(r).max() <= reach
    err = np.abs(np.sin(x.astype(np.float64)) - np.sin(r.astype(np.float64))).max()
    assert err <= bound, f"max |sin(x) - sin(reduced)| {err:.2e} at |x| <= {scale:g}"
