"""Streams, CUDA graphs and memory: concurrent callers on two streams, capture and replay with new
values, a clear error for JIT work inside capture, and no memory growth over many calls."""
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

import mamba3_jit
from mamba3_jit.reference import ARG_NAMES, RESULT_NAMES, case_args, compare, make_case, reference_fwd_vjp

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"variant": "v4"}
# v10 passes carries between CTAs through flags in its workspace: each call must own its flags,
# and a graph must reset them on every replay.
STREAM_VARIANTS = ["v4", "v10", "v11", "v13", "v15", "v17", "v19", "v21", "v23", "v25", "v27", "v29", "v31", "v33", "v35", "v37", "v39", "v41", "v43", "v45", "v47", "v49", "v51", "v53", "v55", "v57", "v59", "v61", "v63", "v65", "v67", "v69", "v71", "v73", "v75", "v77", "v79", "v81", "v83", "v85", "v87", "v89", "v91", "v93", "v95", "v97", "v99", "v101", "v103", "v105", "v107", "v109", "v111", "v113", "v115", "v117", "v119", "v121", "v123", "v125", "v127", "v129", "v131", "v133", "v135", "v138", "v140", "v142", "v144", "v146", "v148", "v150", "v152", "v154", "v156", "v158", "v159", "v161", "v162", "v164", "v165", "v168", "v169", "v171", "v172", "v174", "v175", "v177", "v178", "v180", "v181", "v183", "v184", "v186", "v187", "v189", "v190", "v192", "v193", "v195", "v196", "v198", "v199", "v201", "v202", "v204", "v205", "v207", "v208", "v210", "v211", "v213", "v214", "v216", "v217", "v219", "v220", "v222", "v223", "v225", "v227", "v229", "v231", "v232"]


def _op(*args, config=CONFIG):
    return mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*args, config=config)


def _assert_correct(case, result):
    report = compare(result, reference_fwd_vjp(*case_args(case)), case["cu_seqlens"])
    assert report["ok"], report["failures"]


@pytest.mark.parametrize("variant", STREAM_VARIANTS)
def test_two_threads_two_streams(variant):
    cases = [make_case([150, 77, 0], seed=21, device="cuda"), make_case([300, 5], seed=22, device="cuda")]
    results, errors = [None, None], []

    def worker(i):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(3):
                    results[i] = _op(*case_args(cases[i]), config={"variant": variant})
            stream.synchronize()
        except Exception as e:  # surfaced below with the thread's index
            errors.append((i, e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for case, result in zip(cases, results):
        _assert_correct(case, result)


@pytest.mark.parametrize("variant", STREAM_VARIANTS)
def test_graph_capture_replays_with_new_values(variant):
    config = {"variant": variant}
    seq_lens = [129, 150, 191]
    static = make_case(seq_lens, seed=31, device="cuda")
    args = case_args(static)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _op(*args, config=config)  # loads the kernels before capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _op(*args, config=config)
    fresh = make_case(seq_lens, seed=32, device="cuda")
    for name in ARG_NAMES:
        if name != "cu_seqlens":
            static[name].copy_(fresh[name])
    graph.replay()
    graph.replay()  # a second replay must find its tickets and flags reset
    torch.cuda.synchronize()
    _assert_correct(fresh, captured)
    direct = _op(*case_args(fresh), config=config)
    for n, x, y in zip(RESULT_NAMES, captured, direct):
        assert torch.equal(x, y), f"{n}: graph replay differs from a direct call"


def test_jit_inside_capture_is_a_clear_error():
    # A fresh process, so that no kernel of this shape is loaded yet.
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / 'python')!r})
        import torch, mamba3_jit
        from mamba3_jit.reference import make_case, case_args
        args = case_args(make_case([40, 9], seed=1, device="cuda"))
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*args, config={{"variant": "v4"}})
        except RuntimeError as e:
            print("ERROR:", e)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert "capturing a CUDA graph" in proc.stdout, proc.stdout + proc.stderr


def test_no_memory_growth_over_1000_calls():
    case = make_case([64, 31, 1], seed=41, device="cuda")
    args = case_args(case)
    for _ in range(3):
        _op(*args)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(1000):
        _op(*args)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before


def test_out_of_memory_is_a_clear_error():
    # Valid shapes whose workspace (fp32 states per chunk and per-head partials, about 200 GB)
    # cannot fit: the call must fail with torch's out-of-memory error, not crash.
    T, S, H, N, P, A = 100_000, 1, 1024, 128, 64, 32
    dev = "cuda"
    bf, f32 = torch.bfloat16, torch.float32
    shapes = dict(q=((1, T, 1, N), bf), k=((1, T, 1, N), bf), v=((1, T, H, P), bf), adt=((1, H, T), f32),
                  dt=((1, H, T), f32), trap=((1, H, T), bf), q_bias=((H, N), f32), k_bias=((H, N), f32),
                  angles=((1, T, H, A), bf), d=((H,), f32), z=((1, T, H, P), bf), dout=((1, T, H, P), bf),
                  dfinal_angle=((S, H, A), bf), dfinal_ssm=((S, H, P, N), f32), dfinal_k=((S, H, N), f32),
                  dfinal_v=((S, H, P), bf))
    args = {n: torch.zeros(shape, dtype=dtype, device=dev) for n, (shape, dtype) in shapes.items()}
    args["cu_seqlens"] = torch.tensor([0, T], dtype=torch.int32, device=dev)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            _op(*(args[n] for n in ARG_NAMES))
    finally:
        del args
        torch.cuda.empty_cache()
