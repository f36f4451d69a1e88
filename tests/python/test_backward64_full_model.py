"""The CPU model of v125's whole chunk-64 backward (methods/bank_model/backward64_full_model.py)
against the float64 truth: the two sides' index schemes with the per-token terms the whole kernel
adds (u, dsc, x, G's row and column sums, both halves of dphi, da per chunk), combined by the
mathematics of v103's tail, give every gradient. No GPU: it guards the terms' scheme while the
kernel is changed; the GPU tests check the kernel itself."""

from mamba3_jit.reference import make_case
from bank_models import load_model

model = load_model("backward64_full_model")


def test_whole_backward_terms_give_every_gradient():
    # Empty, one-token, 33- and 64-token sequences and chains of up to three jobs, two heads.
    errs = model.compare(make_case([150, 33, 64, 1, 0, 97], seed=7, H=2))
    # tf32 operands: about 1e-3 (methods/results/precision); a wrong term gives O(1) somewhere.
    assert max(errs.values()) < 5e-3, errs


def test_whole_backward_model_detects_a_lost_term(monkeypatch):
    """The model can fail: without da (the state's decay gradient) dadt goes wrong."""
    run = model.kvm.run_job

    def without_da(*args, **kwargs):
        run(*args, **kwargs)
        for key in args[9]["da"]:
            args[9]["da"][key] = 0.0

    monkeypatch.setattr(model.kvm, "run_job", without_da)
    errs = model.compare(make_case([150, 33], seed=7, H=1))
    assert errs["dadt"] > 0.01
