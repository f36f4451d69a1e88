"""The HBM traffic model (methods/bank_model/traffic_model.py): its compulsory bytes are those of the
reference's own inputs and results (tools/bench.py's count), and the designs' workspace streams keep
the ratios they are built on. No GPU."""

import torch

from bank_models import load_model
from mamba3_jit.reference import RESULT_DTYPES, RESULT_NAMES, case_args, make_case, reference_fwd_vjp

model = load_model("traffic_model")


def test_compulsory_bytes_are_the_inputs_and_results():
    seq_lens = [64, 1, 75]
    args = case_args(make_case(seq_lens, seed=5))
    results = reference_fwd_vjp(*args)
    want = sum(t.numel() * t.element_size() for t in args if torch.is_tensor(t))
    want += sum(r.numel() * torch.empty(0, dtype=RESULT_DTYPES[n]).element_size() for n, r in zip(RESULT_NAMES, results))
    assert abs(model.streams(seq_lens, "v248")["compulsory"] * 1e6 - want) < 0.5


def test_the_designs_streams():
    lens = [959, 900, 897, 950, 931]  # c01
    v248, v253, v255 = (model.streams(lens, d) for d in ("v248", "v253", "v255"))
    nxt = model.streams(lens, "next", heads_per_cta=8)
    assert abs(v248["states"] - 299.9) < 0.1 and abs(v248["partials"] - 303.9) < 0.1
    assert v253["states"] == v248["states"] / 2 and v253["partials"] == v248["partials"]
    assert v255["partials"] == v248["partials"] / 2
    assert nxt["states"] < v253["states"] / 2 and nxt["partials"] == v255["partials"] / 8
    assert v248["floor_us"] == v248["total"] / model.HBM_TBPS
