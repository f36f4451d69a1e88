"""The self-check and bench tools, exercised on the CPU with small stand-in solvers."""

import json
import os
import textwrap

import pytest
import torch

from mamba3_jit import harness as Hn
from mamba3_jit import reference as R
from tools import selfcheck

PRELUDE = "import torch\nfrom mamba3_jit.reference import baseline_fwd_vjp as _base\n"

SOLVERS = {
    "good": """
        def mamba3_siso_varlen_joint_states_full_vjp(*args):
            return _base(*args)
    """,
    "mutates": """
        def mamba3_siso_varlen_joint_states_full_vjp(*args):
            out = _base(*args)
            args[2][0, 0, 0, 0] += 1
            return out
    """,
    "wrong_dq": """
        def mamba3_siso_varlen_joint_states_full_vjp(*args):
            out = list(_base(*args))
            out[5] = out[5] * 1.1
            return tuple(out)
    """,
    "caches": """
        _memo = []
        def mamba3_siso_varlen_joint_states_full_vjp(*args):
            if not _memo:
                _memo.append(_base(*args))
            return _memo[0]
    """,
    "noisy": """
        _calls = [0]
        def mamba3_siso_varlen_joint_states_full_vjp(*args):
            _calls[0] += 1
            out = list(_base(*args))
            out[9] = out[9] * (1 + 1e-6 * _calls[0])
            return tuple(out)
    """,
    "raises": """
        def mamba3_siso_varlen_joint_states_full_vjp(*args):
            raise RuntimeError("no kernel\\nfor this")
    """,
    "wrong_dtype": """
        def mamba3_siso_varlen_joint_states_full_vjp(*args):
            return tuple(x.float() for x in _base(*args))
    """,
}


@pytest.fixture(scope="module")
def panel(tmp_path_factory):
    d = tmp_path_factory.mktemp("panel")
    cases = d / "cases.json"
    cases.write_text(json.dumps({"cases": [
        {"name": "x0", "seed": 5, "seq_lens": [5, 0, 3]},
        {"name": "x1", "seed": 6, "seq_lens": [1]},
    ]}))
    paths = {}
    for name, body in SOLVERS.items():
        p = d / f"solver_{name}.py"
        p.write_text(PRELUDE + textwrap.dedent(body))
        paths[name] = p
    return cases, paths


def _run(capsys, panel, solver, *extra):
    cases, paths = panel
    rc = selfcheck.main(["--device", "cpu", "--cases", str(cases), "--solver", str(paths[solver]),
                         "--no-timing", *extra])
    lines = capsys.readouterr().out.strip().splitlines()
    return rc, lines


def test_good_solver_passes(capsys, panel, tmp_path):
    out = tmp_path / "report.json"
    rc, lines = _run(capsys, panel, "good", "--json", str(out))
    assert rc == 0, "\n".join(lines)
    assert lines[-1] == "selfcheck: PASS geomean n/a"
    report = json.loads(out.read_text())
    assert report["summary"]["pass"] and len(report["cases"]) == 2


@pytest.mark.parametrize("solver,reason", [
    ("mutates", "mutated inputs v"),
    ("wrong_dq", "wrong dq"),
    ("caches", "wrong on other inputs"),
    ("noisy", "repeat call not bitwise equal: ddt"),
    ("raises", "raised RuntimeError: no kernel for this"),
    ("wrong_dtype", "wrong output,final_angle_state"),
])
def test_bad_solvers_fail(capsys, panel, solver, reason):
    rc, lines = _run(capsys, panel, solver)
    assert rc == 1
    assert lines[-1].startswith("selfcheck: FAIL ")
    assert reason in lines[-1], lines[-1]
    assert "\n" not in lines[-1]


def test_cases_filter(capsys, panel):
    rc, lines = _run(capsys, panel, "good", "--cases-filter", "x1")
    assert rc == 0
    assert any(line.startswith("[1/1] x1") for line in lines)
    rc, lines = _run(capsys, panel, "good", "--cases-filter", "nothing")
    assert rc == 1 and lines[-1].startswith("selfcheck: FAIL no cases")


def test_timed_run_reports_a_geomean(capsys, panel):
    cases, paths = panel
    # CPU wall-clock timing is too noisy for the 1.25x stability rule, so only the format of a
    # timed run is checked here.
    selfcheck.main(["--device", "cpu", "--cases", str(cases), "--solver", str(paths["good"]),
                    "--cases-filter", "x1", "--warmup", "1", "--iters", "3"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert any("speedup" in line for line in lines)
    assert lines[-1].startswith("selfcheck: PASS geomean ") or "timing unstable" in lines[-1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA exit")
def test_no_cuda_exits_2(capsys, panel):
    cases, paths = panel
    assert selfcheck.main(["--cases", str(cases), "--solver", str(paths["good"])]) == 2


def test_time_calls_on_cpu():
    calls = []
    times = Hn.time_calls(lambda x: calls.append(x), (1,), device="cpu", warmup=2, iters=4)
    assert len(times) == 4 and all(t >= 0 for t in times) and len(calls) == 6


def test_bitwise_equal():
    a = torch.tensor([0.0, float("nan"), 1.0])
    assert Hn.bitwise_equal(a, a.clone())
    assert not Hn.bitwise_equal(a, torch.tensor([-0.0, float("nan"), 1.0]))
    assert not Hn.bitwise_equal(a, a.double())
    assert Hn.bitwise_equal(torch.zeros(0, 3), torch.zeros(0, 3))
    assert Hn.mismatches(("a", "b", "c"), [a, a], [a, a + 1]) == ["b", "c"]


def test_default_panel_is_the_visible_one():
    cases = Hn.load_cases()
    assert [c["name"] for c in cases] == [f"c0{i}" for i in range(8)]
    for c in cases:
        assert 3 <= len(c["seq_lens"]) <= 5
        assert all(129 <= n <= 959 and n % 64 for n in c["seq_lens"])


# ------------------------------------------------------------------------------------------------
# bench
# ------------------------------------------------------------------------------------------------

def test_bench_flop_model():
    from tools import bench

    full = 6 * 64 * 64 * (128 + 64) + 12 * 64 * 128 * 64
    assert bench.model_flops([64], H=1) == full
    assert bench.model_flops([65], H=1) == full + 6 * (128 + 64) + 12 * 128 * 64
    assert bench.model_flops([0, 64, 64], H=32) == 2 * 32 * full


def test_bench_busy_span_counts_overlapping_kernels_once():
    from tools import bench

    assert bench._busy_us([]) == 0.0
    assert bench._busy_us([(0.0, 10.0), (20.0, 25.0)]) == 15.0
    # a kernel launched beside its predecessor's tail, and one nested inside another
    assert bench._busy_us([(5.0, 30.0), (0.0, 10.0), (12.0, 14.0), (29.0, 40.0)]) == 40.0


def test_bench_runs_on_cpu(panel, tmp_path, capsys):
    from tools import bench

    cases, paths = panel
    out = tmp_path / "bench.json"
    rc = bench.main(["--device", "cpu", "--cases", str(cases), "--solver", str(paths["good"]),
                     "--warmup", "1", "--iters", "2", "--json", str(out)])
    assert rc == 0
    recs = json.loads(out.read_text())["cases"]
    case = R.make_case([5, 0, 3], 5)
    args = R.case_args(case)
    assert recs[0]["model_bytes"] == bench.model_bytes(args, R.baseline_fwd_vjp(*args))
    assert recs[0]["latency_ms"] > 0 and recs[0]["speedup"] > 0
    assert "geomean speedup" in capsys.readouterr().out


def test_bench_pins_itself_to_the_core_asked_and_refuses_one_it_may_not_use(panel, tmp_path):
    from tools import bench

    cases, paths = panel
    before = os.sched_getaffinity(0)
    core = max(before)
    out = tmp_path / "bench.json"
    try:
        rc = bench.main(["--device", "cpu", "--cases", str(cases), "--solver", str(paths["good"]),
                         "--warmup", "1", "--iters", "1", "--no-baseline", "--pin-cpu", str(core),
                         "--json", str(out)])
        assert rc == 0
        assert os.sched_getaffinity(0) == {core}
        assert json.loads(out.read_text())["meta"]["pinned_cpu"] == core
    finally:
        os.sched_setaffinity(0, before)
    with pytest.raises(SystemExit):
        bench.parse_args(["--pin-cpu", str(max(before) + 4096)])
    assert os.sched_getaffinity(0) == before


def test_bench_solver_labels():
    from tools import bench

    assert bench.solver_labels(["a/v1/solver.py", "a/main/solver.py"]) == ["v1", "main"]
    assert bench.solver_labels(["d/one.py", "d/two.py"]) == ["d/one", "d/two"]
    assert bench.solver_labels(["m/solver.py", "m/solver.py"]) == ["m/solver#1", "m/solver#2"]


def test_bench_two_solvers_side_by_side(panel, tmp_path, capsys):
    from tools import bench

    cases, paths = panel
    # Two copies in directories of their own, as methods/versions/v1 and methods/main are laid
    # out, so that the labels are the directory names.
    solver_paths = []
    for label, src in (("v1", "good"), ("v2", "noisy")):
        d = tmp_path / label
        d.mkdir()
        (d / "solver.py").write_text(paths[src].read_text())
        solver_paths.append(d / "solver.py")
    out = tmp_path / "bench.json"
    rc = bench.main(["--device", "cpu", "--cases", str(cases), "--solver", str(solver_paths[0]),
                     "--solver", str(solver_paths[1]), "--warmup", "1", "--iters", "2",
                     "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["solvers"] == ["v1", "v2"]
    assert set(report["meta"]["solvers"]) == {"v1", "v2"} and report["meta"]["reps"] == 2
    assert [c["name"] for c in report["cases"]] == ["x0", "x1"]
    for case in report["cases"]:
        assert case["baseline_ms"] > 0 and case["model_bytes"] > 0
        for label in ("v1", "v2"):
            s = case["solvers"][label]
            assert s["latency_ms"] > 0 and s["speedup"] > 0
            assert len(s["times_ms"]) == 2 and all(len(p) == 2 for p in s["times_ms"])
            assert len(s["pass_ms"]) == 2
    for label in ("v1", "v2"):
        assert report["summary"][label]["cases"] == 2
        assert report["summary"][label]["geomean_speedup"] > 0
    text = capsys.readouterr().out
    assert "v1 ms" in text and "v2 ms" in text
    assert "geomean speedup" in text and ": v2" in text


def test_bench_default_solver_is_main():
    from tools import bench

    opts = bench.parse_args([])
    assert opts.solver == [str(Hn.DEFAULT_SOLVER)] and opts.reps == 1
    assert bench.parse_args(["--solver", "a.py", "--solver", "b.py"]).reps == 2


def test_precision_study_rounds_like_the_tensor_core_formats():
    """methods/precision_study.py emulates operand formats: bf16 rounding must be torch's own
    (round to nearest even), and the split product must be far more exact than the plain one."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("precision_study", Hn.REPO / "methods" / "precision_study.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4096, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-6, 6, (4096,), generator=g)
    assert torch.equal(study.round_to(x, 8), x.to(torch.bfloat16).to(torch.float64))
    a = torch.randn(64, 128, generator=g, dtype=torch.float64)
    b = torch.randn(128, 32, generator=g, dtype=torch.float64)
    exact = a @ b
    plain = study.operand_product("bf16")(a, b)
    split = study.operand_product("bf16x3")(a, b)
    err = lambda y: ((y - exact).norm() / exact.norm()).item()  # noqa: E731
    assert err(plain) > 1e-3 and err(split) < 1e-4
    # One split operand: exact when the other is bf16 already, between plain and split otherwise.
    b16 = study.round_to(b, 8)
    assert err(study.operand_product("bf16x2a")(a, b)) > 1e-3
    assert ((study.operand_product("bf16x2a")(a, b16) - a @ b16).norm() / (a @ b16).norm()).item() < 1e-4
    assert ((study.operand_product("bf16x2b")(b16.T, a.T) - b16.T @ a.T).norm() / (a @ b16).norm()).item() < 1e-4
    # "F|G|H" per product: the forward in F, the two backward products in G and H.
    mm = study.rounded_matmul("fp64|bf16|bf16x3")
    a_ = a.clone().requires_grad_(True)
    b_ = b.clone().requires_grad_(True)
    out = mm(a_, b_)
    assert torch.equal(out, exact)
    gout = torch.randn(out.shape, generator=g, dtype=torch.float64)
    out.backward(gout)
    assert err_of(a_.grad, gout @ b.T) > 1e-3 and err_of(b_.grad, a.T @ gout) < 1e-4


def err_of(y, exact):
    return ((y - exact).norm() / exact.norm()).item()


def test_precision_study_half_formats_and_their_range():
    """fp16 rounds as IEEE half (tf32's 11 bits, half's range: inf past 65504); fp16s scales each
    tile by a power of two first, so large operands keep the same relative error."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("precision_study", Hn.REPO / "methods" / "precision_study.py")
    study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(study)
    g = torch.Generator().manual_seed(5)
    a = torch.randn(2, 64, 128, generator=g, dtype=torch.float64)
    b = torch.randn(2, 128, 32, generator=g, dtype=torch.float64)
    exact = a @ b
    half, scaled, tf32 = (study.operand_product(f) for f in ("fp16", "fp16s", "tf32"))
    # Within the range, half rounds like tf32 (to nearest, 11 significant bits): the same error size.
    assert 1e-4 < err_of(half(a, b), exact) < 1e-3
    assert abs(err_of(half(a, b), exact) / err_of(tf32(a, b), exact) - 1.0) < 0.2
    # Past half's range the plain format overflows and the scaled one does not notice.
    big = a * 2.0 ** 20
    assert not torch.isfinite(half(big, b)).all()
    assert err_of(scaled(big, b), big @ b) < 1e-3
    # Each tile (last two dimensions) gets its own scale: a tiny tile beside a huge one keeps its bits.
    mixed = torch.stack([a[0] * 2.0 ** 20, a[1] * 2.0 ** -20])
    prod = scaled(mixed, b)
    assert err_of(prod[1], (mixed @ b)[1]) < 1e-3


NCU_SOURCE_CSV = '''"File Path","/build/kernel_src/m3_common.cuh"
"Line No","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_barrier","stall_long_sb (Not Issued)","Instructions Executed","L1 Wavefronts Shared Excessive","L1 Wavefronts Shared","L1 Wavefronts Shared Ideal"
"10","a = b;","1,000","800","100","999","2,000","30","90","60"
"    /*0010*/ LDS R0, [R1]","","500","400","0","0","1,000","30","90","60"
"11","c = d;","200","0","150","0","400","0","10","10"
"File Path","/build/kernel_src/m3_chunk_scan.cuh"
"Line No","Source","Warp Stall Sampling (All Samples)","stall_long_sb","stall_barrier","stall_long_sb (Not Issued)","Instructions Executed","L1 Wavefronts Shared Excessive","L1 Wavefronts Shared","L1 Wavefronts Shared Ideal"
"10","e = f;","300","0","300","0","100","50","100","50"
'''


def test_ncu_lines_sums_line_rows_by_file_and_ranks_them(tmp_path, capsys):
    """tools/ncu_lines.py reads only the CUDA line rows (not the SASS rows under them), keeps lines
    of the same number in different files apart, leaves out the "Not Issued" stall columns, and
    ranks lines by samples and by excessive shared wavefronts."""
    from tools import ncu_lines
    path = tmp_path / "k.csv"
    path.write_text(NCU_SOURCE_CSV)
    per_line, columns = ncu_lines.read_lines(str(path))
    assert set(per_line) == {("m3_common.cuh", 10), ("m3_common.cuh", 11), ("m3_chunk_scan.cuh", 10)}
    assert per_line[("m3_common.cuh", 10)]["Warp Stall Sampling (All Samples)"] == 1000
    assert per_line[("m3_common.cuh", 10)]["Instructions Executed"] == 2000
    assert "stall_long_sb (Not Issued)" not in columns
    assert per_line[("m3_chunk_scan.cuh", 10)]["L1 Wavefronts Shared Excessive"] == 50

    import sys
    argv = sys.argv
    sys.argv = ["ncu_lines.py", str(path), "--top", "2", "--src", str(tmp_path)]
    try:
        ncu_lines.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert "samples 1500  instructions executed 2500" in out
    assert "long_sb 53.3%" in out and "barrier 36.7%" in out
    assert "L1 Wavefronts Shared Excessive: 80" in out
    by_samples = out.split("top 2 lines by stall samples")[1].split("top 2 lines by")[0]
    assert by_samples.index("m3_common.cuh:10") < by_samples.index("m3_chunk_scan.cuh:10")
    assert "m3_common.cuh:11" not in by_samples  # third by samples: past --top 2
    by_excess = out.split("by 'L1 Wavefronts Shared Excessive'")[1]
    assert by_excess.index("m3_chunk_scan.cuh:10") < by_excess.index("m3_common.cuh:10")
    assert "62.5%" in by_excess  # 50 of the 80 excessive wavefronts
