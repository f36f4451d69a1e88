"""The operator on the GPU against the float64 truth: the stored small vectors, random length
mixes with the edge shapes of SPEC section 3, input immutability and bitwise repeatability."""
import random

import pytest
import torch

import mamba3_jit
from mamba3_jit.reference import ARG_NAMES, RESULT_NAMES, case_args, compare, make_case, reference_fwd_vjp, rel_l2
from mamba3_jit.training import _native_op

pytestmark = pytest.mark.gpu

# Every kernel variant a solver version can select stays correct.
VARIANTS = ["v1", "v2", "v3", "v4", "v5", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "v32", "v33", "v34", "v35", "v36", "v37", "v38", "v39", "v40", "v41", "v42", "v43", "v44", "v45", "v46", "v47", "v48", "v49", "v50", "v51", "v52", "v53", "v54", "v55", "v56", "v57", "v58", "v59", "v60", "v61", "v62", "v63", "v64", "v65", "v66", "v67", "v68", "v69", "v70", "v71", "v72", "v73", "v74", "v75", "v76", "v77", "v78", "v79", "v80", "v81", "v82", "v83", "v84", "v85", "v86", "v87", "v88", "v89", "v90", "v91", "v92", "v93", "v94", "v95", "v96", "v97", "v98", "v99", "v100", "v101", "v102", "v103", "v104", "v105", "v106", "v107", "v108", "v109", "v110", "v111", "v112", "v113", "v114", "v115", "v116", "v117", "v118", "v119", "v120", "v121", "v122", "v123", "v124", "v125", "v126", "v127", "v128", "v129", "v130", "v131", "v132", "v133", "v134", "v135", "v136", "v137", "v138", "v139", "v140", "v141", "v142", "v143", "v144", "v145", "v146", "v147", "v148", "v149", "v150", "v151", "v152", "v153", "v154", "v155", "v156", "v157", "v158", "v159", "v160", "v161", "v162", "v163", "v164", "v165", "v166", "v168", "v169", "v170", "v171", "v172", "v173", "v174", "v175", "v176", "v177", "v178", "v179", "v180", "v181", "v182", "v183", "v184", "v185", "v186", "v187", "v188", "v189", "v190", "v191", "v192", "v193", "v194", "v195", "v196", "v197", "v198", "v199", "v200", "v201", "v202", "v203", "v204", "v205", "v206", "v207", "v208", "v209", "v210", "v211", "v212", "v213", "v214", "v215", "v216", "v217", "v218", "v219", "v220", "v221", "v222", "v223", "v224", "v225", "v226", "v227", "v228", "v229", "v230", "v231", "v232", "v233", "v234", "v235", "v236", "v237", "v238", "v239", "v240", "v241", "v242", "v243", "v244", "v245", "v246", "v247", "v248", "v249", "v250", "v251", "v252", "v253", "v254", "v255"]


def _run(case, variant="v1"):
    return mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(case), config={"variant": variant})


# The float64 truth of a case depends only on its (seq_lens, seed), and every variant is checked
# against it: computing it once per case rather than once per variant keeps the GPU suite inside
# one short run.
_TRUTH = {}


def _case(seq_lens, seed):
    case = make_case(seq_lens, seed=seed, device="cuda")
    case["_key"] = (tuple(seq_lens), seed)
    return case


def _truth(case):
    key = case.get("_key")
    if key is None:
        return reference_fwd_vjp(*case_args(case))
    if key not in _TRUTH:
        _TRUTH[key] = reference_fwd_vjp(*case_args(case))
    return _TRUTH[key]


def _check(case, result=None, variant="v1"):
    result = _run(case, variant) if result is None else result
    truth = _truth(case)
    report = compare(result, truth, case["cu_seqlens"])
    worst = {n: report["tensors"][n]["rel_l2"] for n in RESULT_NAMES}
    assert report["ok"], f"{report['failures']} (rel-L2 per tensor: {worst})"
    return result


@pytest.mark.parametrize("variant", VARIANTS)
def test_vectors_small(small_vectors, variant):
    inputs = small_vectors["inputs"]
    if isinstance(inputs, dict):
        args = [inputs[n].cuda() for n in ARG_NAMES]
    else:
        args = [t.cuda() for t in inputs]
    result = mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*args, config={"variant": variant})
    expected = small_vectors["expected"]
    truth = [expected[n].cuda().double() for n in RESULT_NAMES]
    report = compare(result, truth, args[ARG_NAMES.index("cu_seqlens")])
    assert report["ok"], report["failures"]


EDGE_MIXES = [
    [1],
    [2],
    [63],
    [64],
    [65],
    [128],
    [0, 37, 0],
    [1, 64, 2, 63, 65, 128],
    [129, 150, 191],
    [959, 300, 64, 1],
]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("seq_lens", EDGE_MIXES, ids=lambda x: "-".join(map(str, x)))
def test_edge_and_family_shapes(seq_lens, variant, reliability):
    _check(_case(seq_lens, 11), variant=variant)
    reliability.record("edge_shape", "-".join(map(str, seq_lens)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_random_mixes(variant, reliability):
    rng = random.Random(1234)
    for trial in range(4):
        S = rng.randint(1, 6)
        seq_lens = [rng.choice([0, 1, rng.randint(2, 70), rng.randint(100, 700)]) for _ in range(S)]
        if sum(seq_lens) == 0:
            seq_lens[0] = 5
        _check(_case(seq_lens, 100 + trial), variant=variant)
        reliability.record("edge_shape", "-".join(map(str, seq_lens)))


@pytest.mark.parametrize("variant", VARIANTS)
def test_many_sequences(variant):
    rng = random.Random(5)
    seq_lens = [rng.randint(0, 40) for _ in range(64)]
    _check(_case(seq_lens, 3), variant=variant)


@pytest.mark.parametrize("variant", VARIANTS)
def test_fresh_call_immutability_and_bitwise_repeat(variant):
    case_a = _case([129, 150, 191], 1)
    case_b = _case([200, 77], 2)
    snapshot = {n: case_a[n].clone() for n in ARG_NAMES}
    first = _run(case_a, variant)
    for n in ARG_NAMES:
        assert torch.equal(case_a[n], snapshot[n]), f"input {n} was modified"
    _check(case_b, variant=variant)   # a fresh call with other shapes and values in between
    again = _run(case_a, variant)
    for n, x, y in zip(RESULT_NAMES, first, again):
        assert torch.equal(x, y), f"{n} differs bitwise between two calls on the same inputs"
    _check(case_a, result=again)


def test_runs_on_current_stream():
    case = make_case([100, 31], seed=9, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        result = _run(case)
    side.synchronize()
    _check(case, result=result)


# Variants that change how values are computed or where they sit, never which products are
# summed in which order: every result must match the predecessor bit for bit. The cases cover
# partial chunks, a one-token sequence, an empty one, and (through make_case) the final-state
# cotangents.
# Three length mixes for the twins from v127 on: with empty, one-token and 64-multiple sequences;
# with two of thousands of tokens; with five short ones. One seed each.
THREE_MIXES = ([959, 300, 0, 64, 1, 33], [4000, 17, 2900, 1], [150, 65, 191, 96, 32])


def _on_three_mixes(reference, variant, seeds):
    return [(reference, variant, lens, seed) for lens, seed in zip(THREE_MIXES, seeds)]


BITWISE_TWINS = [
    # the tf32 operands rounded by one integer add instead of cvt.rna: the same bits for finite values
    ("v5", "v7", [959, 300, 64, 1], 31),
    # the input tiles from one cp.async prefetch instead of phase-by-phase loads
    ("v15", "v17", [959, 300, 0, 64, 1, 33], 37),
    # the entering state and the state gradient read from global memory instead of shared tiles
    ("v21", "v23", [959, 300, 0, 64, 1, 33], 41),
    # padded angle rows, the gradient update's loads before its stores, 16-byte bias partials
    ("v23", "v25", [959, 300, 0, 64, 1, 33], 43),
    # the states and their gradients in fragment order, read and written 16 bytes at a time
    ("v25", "v27", [959, 300, 0, 64, 1, 33], 47),
    # the fragment-order words placed so that every store instruction writes whole sectors
    ("v27", "v29", [959, 300, 0, 64, 1, 33], 53),
    # the forward's entering state read from the workspace instead of a shared tile
    ("v29", "v31", [959, 300, 0, 64, 1, 33], 59),
    # only the state gradients in fragment order
    ("v25", "v33", [959, 300, 0, 64, 1, 33], 61),
    # the kernels after the first launched early, each waiting for its predecessor itself
    ("v37", "v39", [959, 300, 0, 64, 1, 33], 67),
    # the row-major shared operands of the tile products read by ldmatrix
    ("v39", "v41", [959, 300, 0, 64, 1, 33], 71),
    # ldmatrix in the backward's own products only
    ("v37", "v43", [959, 300, 0, 64, 1, 33], 73),
    # persistent CTAs drawing their next ticket while a job runs; the reorder's loads batched
    ("v43", "v45", [959, 300, 0, 64, 1, 33], 79),
    ("v43", "v45", [4000, 17, 2900, 1], 83),
    # only the angle kernel's reorder batched
    ("v43", "v47", [959, 300, 0, 64, 1, 33], 89),
    # dq and dk summed over the heads by the backward's last CTA per chunk, in the same order
    ("v47", "v49", [959, 300, 0, 64, 1, 33], 97),
    ("v47", "v49", [4000, 17, 2900, 1], 101),
    # the entering state prefetched into L2 when a backward job starts
    ("v47", "v51", [959, 300, 0, 64, 1, 33], 103),
    # the next chunk's inputs prefetched into L2 by the chunk before it in each chain
    ("v51", "v57", [959, 300, 0, 64, 1, 33], 109),
    ("v51", "v57", [4000, 17, 2900, 1], 113),
    ("v51", "v59", [959, 300, 0, 64, 1, 33], 127),
    # the bias partials written before the backward's tail waits for the successor's carries
    ("v59", "v61", [959, 300, 0, 64, 1, 33], 131),
    ("v59", "v61", [4000, 17, 2900, 1], 137),
    # each chunk's sequence start, length and first chunk from the ticket table
    ("v61", "v63", [959, 300, 0, 64, 1, 33], 139),
    ("v61", "v63", [4000, 17, 2900, 1], 149),
    ("v59", "v65", [959, 300, 0, 64, 1, 33], 151),
    ("v59", "v65", [4000, 17, 2900, 1], 157),
    # the mixing matrix loaded from the forward instead of rebuilt
    ("v65", "v69", [959, 300, 0, 64, 1, 33], 163),
    ("v65", "v69", [4000, 17, 2900, 1], 167),
    # the 32-byte shared row pieces in a bank-conflict-free order
    ("v65", "v71", [959, 300, 0, 64, 1, 33], 173),
    ("v65", "v71", [4000, 17, 2900, 1], 179),
    # q/k staging lanes interleaving two rows per quarter-warp
    ("v71", "v73", [959, 300, 0, 64, 1, 33], 181),
    ("v71", "v73", [4000, 17, 2900, 1], 191),
    # the angle kernel in clusters: 8 ranks for 4000 tokens, 4 for 959, 1 for 150 (the other
    # tests' short mixes)
    ("v79", "v81", [959, 300, 0, 64, 1, 33], 193),
    ("v79", "v81", [4000, 17, 2900, 1], 197),
    ("v79", "v81", [150, 129, 191], 199),
    # the angle rows loaded a quarter per lane, the products summed through shared memory
    ("v79", "v83", [959, 300, 0, 64, 1, 33], 211),
    ("v79", "v83", [4000, 17, 2900, 1], 223),
    # both: the quarter-per-lane chunk totals shared out over a cluster
    ("v83", "v85", [959, 300, 0, 64, 1, 33], 227),
    ("v83", "v85", [4000, 17, 2900, 1], 229),
    # the head sums and the partials' sums in one launch
    ("v83", "v87", [959, 300, 0, 64, 1, 33], 233),
    ("v83", "v87", [4000, 17, 2900, 1], 239),
    # the forward's q/k rows, biases and angles requested before the scalar phases
    ("v89", "v91", [959, 300, 0, 64, 1, 33], 241),
    ("v89", "v91", [4000, 17, 2900, 1], 251),
    # and the head's v, z and dout rows
    ("v89", "v93", [959, 300, 0, 64, 1, 33], 257),
    ("v89", "v93", [4000, 17, 2900, 1], 263),
    # and the backward's loads likewise
    ("v89", "v95", [959, 300, 0, 64, 1, 33], 269),
    ("v89", "v95", [4000, 17, 2900, 1], 271),
    # persistent CTAs that draw their next ticket late in a job: both kernels, the forward's only
    ("v89", "v97", [959, 300, 0, 64, 1, 33], 277),
    ("v89", "v97", [4000, 17, 2900, 1], 281),
    ("v89", "v99", [959, 300, 0, 64, 1, 33], 283),
    ("v89", "v99", [4000, 17, 2900, 1], 293),
    # the reduce launched beside the backward's last wave, each chunk's head sums once its heads
    # have counted in
    ("v89", "v101", [959, 300, 0, 64, 1, 33], 307),
    ("v89", "v101", [4000, 17, 2900, 1], 311),
    # dead workspace lines dropped from L2: the states in the backward, then the summed partials
    ("v89", "v103", [959, 300, 0, 64, 1, 33], 317),
    ("v89", "v103", [4000, 17, 2900, 1], 331),
    ("v89", "v105", [959, 300, 0, 64, 1, 33], 337),
    ("v89", "v105", [4000, 17, 2900, 1], 347),
    # each backward job sums the dq/dk partials of the chunk three ahead in its sequence
    ("v89", "v107", [959, 300, 0, 64, 1, 33], 349),
    ("v89", "v107", [4000, 17, 2900, 1], 353),
    # the backward launched beside the forward's last jobs
    ("v89", "v109", [959, 300, 0, 64, 1, 33], 359),
    ("v89", "v109", [4000, 17, 2900, 1], 367),
    ("v89", "v109", [150, 129, 191], 373),
    # the states in fragment order, read by a forward without a state tile; at three CTAs per SM
    ("v89", "v111", [959, 300, 0, 64, 1, 33], 379),
    ("v89", "v111", [4000, 17, 2900, 1], 383),
    ("v89", "v113", [959, 300, 0, 64, 1, 33], 389),
    ("v89", "v113", [4000, 17, 2900, 1], 397),
    ("v89", "v113", [150, 129, 191], 401),
    ("v89", "v117", [959, 300, 0, 64, 1, 33], 431),
    ("v89", "v117", [4000, 17, 2900, 1], 433),
    # the chunk-64 forward's states written through a shared tile; and its q/k loads issued early
    # (a sequence of 65 tokens: a job whose second half has one token)
    *_on_three_mixes("v119", "v127", (523, 541, 547)),
    *_on_three_mixes("v119", "v129", (557, 563, 569)),
    *_on_three_mixes("v119", "v131", (571, 577, 587)),
    # the same forward with its descriptors and KS^T's transpose at offsets worked out once
    *_on_three_mixes("v119", "v133", (593, 599, 601)),
    *_on_three_mixes("v119", "v135", (607, 613, 617)),
    # the 32-token backward's q/k and v/dy tiles with rows 8 (mod 32) floats apart (and the q/k
    # tiles' odd rows flipped, v140): the same arithmetic at other shared addresses
    *_on_three_mixes("v135", "v138", (619, 631, 641)),
    *_on_three_mixes("v135", "v140", (643, 647, 653)),
    # v138 whose backward copies the entering state into shared memory as a job starts
    *_on_three_mixes("v135", "v142", (659, 661, 673)),
    # v142 whose update loads the successor's state gradient for all its rows at once
    *_on_three_mixes("v135", "v146", (677, 683, 691)),
    # v142 whose m, x, t1 and t2 tiles take v138's rows, t1 and t2 stored as 8-byte pairs
    *_on_three_mixes("v135", "v148", (701, 709, 719)),
    # v148 whose state copy's quarter-warps write consecutive shared slots
    *_on_three_mixes("v135", "v150", (727, 733, 739)),
    # v148 reading the successor's state gradient through L1
    *_on_three_mixes("v135", "v152", (743, 751, 757)),
    # v144 (the 32-token set) with v148's m, x, t1 and t2 rows
    *_on_three_mixes("v144", "v154", (761, 769, 773)),
    # v148 whose chunk-64 forward stores the staged q/k octets' halves in a conflict-free order
    *_on_three_mixes("v148", "v156", (787, 797, 809)),
    # v148 and v154 with the lean angle kernel (m3_angles_lean.cuh)
    *_on_three_mixes("v148", "v158", (811, 821, 823)),
    *_on_three_mixes("v154", "v159", (827, 829, 839)),
    # v158 and v159 whose reduce loads more partials rows and heads at once
    *_on_three_mixes("v158", "v161", (853, 857, 859)),
    *_on_three_mixes("v159", "v162", (863, 877, 881)),
    # v148 and v154 with that reduce alone
    *_on_three_mixes("v148", "v164", (883, 887, 907)),
    *_on_three_mixes("v154", "v165", (911, 919, 929)),
    # v164 and v165 whose sincosf large-angle path is out of line (M3_SINCOS_OUTLINE)
    *_on_three_mixes("v164", "v168", (937, 941, 947)),
    *_on_three_mixes("v165", "v169", (953, 967, 971)),
    # v168 and v169 whose backward takes its sequence from the ticket table
    *_on_three_mixes("v168", "v171", (977, 983, 991)),
    *_on_three_mixes("v169", "v172", (997, 1009, 1013)),
    # v174 and v175 whose bf16 results leave in hardware-packed pairs
    *_on_three_mixes("v174", "v177", (1039, 1049, 1051)),
    *_on_three_mixes("v175", "v178", (1061, 1063, 1069)),
    # v177 and v178 whose early loads take four angle elements of one token as one word
    *_on_three_mixes("v177", "v180", (1087, 1091, 1093)),
    *_on_three_mixes("v178", "v181", (1097, 1103, 1109)),
    # v177 and v178 whose backward reads the state's copy at per-thread column offsets
    *_on_three_mixes("v177", "v183", (1117, 1123, 1129)),
    *_on_three_mixes("v178", "v184", (1151, 1153, 1163)),
    # v183 and v184 whose missing state gradient is a zero tile, not a null test
    *_on_three_mixes("v183", "v186", (1171, 1181, 1187)),
    *_on_three_mixes("v184", "v187", (1193, 1201, 1213)),
    # v180 and v181 with that zero tile alone
    *_on_three_mixes("v180", "v189", (1217, 1223, 1229)),
    *_on_three_mixes("v181", "v190", (1231, 1237, 1249)),
    # v180 and v181 whose dqr inter product waits in t1 while the intra product runs
    *_on_three_mixes("v180", "v192", (1259, 1277, 1279)),
    *_on_three_mixes("v181", "v193", (1283, 1289, 1291)),
    # v180 and v181 compiled with ptxas's default loads streaming (-dlcm=cs), then past L1 (-dlcm=cg)
    *_on_three_mixes("v180", "v195", (1297, 1301, 1303)),
    *_on_three_mixes("v181", "v196", (1307, 1319, 1321)),
    *_on_three_mixes("v180", "v198", (1327, 1361, 1367)),
    *_on_three_mixes("v181", "v199", (1373, 1381, 1399)),
    # those with ptxas's register usage level 1 (fewer spill slots): over the streaming pair, then alone
    *_on_three_mixes("v195", "v201", (1409, 1423, 1427)),
    *_on_three_mixes("v196", "v202", (1429, 1433, 1439)),
    *_on_three_mixes("v180", "v204", (1447, 1451, 1453)),
    *_on_three_mixes("v181", "v205", (1459, 1471, 1481)),
    # v201 and v202's options for the backward's own module only
    *_on_three_mixes("v180", "v207", (1483, 1487, 1489)),
    *_on_three_mixes("v181", "v208", (1493, 1499, 1511)),
    # v213 and v214 whose forward kernels take the fast sin/cos path for every angle (M3_SINCOS_WIDE)
    *_on_three_mixes("v210", "v213", (1553, 1559, 1567)),
    *_on_three_mixes("v211", "v214", (1571, 1579, 1583)),
    # v216 and v217: the opaque tile index; v219 and v220 with M3_SINCOS_WIDE in every kernel
    *_on_three_mixes("v210", "v216", (1601, 1607, 1609)),
    *_on_three_mixes("v211", "v217", (1613, 1619, 1621)),
    *_on_three_mixes("v210", "v219", (1627, 1637, 1657)),
    *_on_three_mixes("v211", "v220", (1663, 1667, 1669)),
    # v222 and v223: every thread-index read opaque
    *_on_three_mixes("v210", "v222", (1693, 1697, 1699)),
    *_on_three_mixes("v211", "v223", (1709, 1721, 1723)),
    # v225: the chunk-64 forward's L2 prefetches; v227: the backward's too
    *_on_three_mixes("v222", "v225", (1733, 1741, 1747)),
    *_on_three_mixes("v222", "v227", (1753, 1759, 1777)),
    # v229: the likely ticket's row loaded with the atomic
    *_on_three_mixes("v222", "v229", (1783, 1787, 1789)),
    # v231 and v232: the aligned ticket order (the mixes have sequences of unequal length)
    *_on_three_mixes("v222", "v231", (1801, 1811, 1823)),
    *_on_three_mixes("v223", "v232", (1831, 1847, 1861)),
    # v235 and v236: v231's cubins with the backward or the chunk-64 forward alone on its SM
    *_on_three_mixes("v231", "v235", (1867, 1871, 1873)),
    *_on_three_mixes("v231", "v236", (1877, 1879, 1889)),
    # v249 and v250: the reduce's count released after the per-token tail, by warp 1
    *_on_three_mixes("v246", "v249", (1949, 1951, 1973)),
    *_on_three_mixes("v247", "v250", (1979, 1987, 1993)),
]


@pytest.mark.parametrize("reference,variant,seq_lens,seed", BITWISE_TWINS,
                         ids=[f"{v}_is_{r}_seed{seed}" for r, v, _, seed in BITWISE_TWINS])
def test_bitwise_twin_variants(reference, variant, seq_lens, seed):
    case = make_case(seq_lens, seed=seed, device="cuda")
    ref = _run(case, reference)
    got = _run(case, variant)
    for name, a, b in zip(RESULT_NAMES, ref, got):
        assert torch.equal(a, b), f"{name} differs between {reference} and {variant}"


@pytest.mark.parametrize("seq_lens,seed", [([959, 300, 0, 64, 1, 33], 439), ([4000, 17, 2900, 1], 443),
                                           ([150, 129, 191, 96, 32], 449)])
def test_v119_chunk64_forward_is_v89_within_rounding_and_repeatable(seq_lens, seed):
    """v119's forward (jobs of two chunks on warpgroup products) computes v89's mathematics chunk
    by chunk with its products summed in other orders, and hands the backward the same states:
    every result within rounding of v89's (relative L2 distance per tensor at most 5e-3, half of
    SPEC's tolerance and the issue's bar: bf16 results whose fp32 values moved by rounding flip
    an ulp here and there), and bitwise the same from call to call."""
    case = make_case(seq_lens, seed=seed, device="cuda")
    ref = _run(case, "v89")
    got = _run(case, "v119")
    again = _run(case, "v119")
    for name, a, b, c in zip(RESULT_NAMES, ref, got, again):
        assert torch.equal(b, c), f"{name}: two v119 calls differ"
        assert torch.isfinite(b.float()).all(), f"{name}: v119 gives non-finite values"
        dist, absolute = rel_l2(b, a, circular=name == "final_angle_state")
        # (A zero v89 tensor allows no difference at all.)
        assert (dist == 0.0) if absolute else (dist <= 5e-3), f"{name}: v119 against v89, distance {dist:.2e}"


@pytest.mark.parametrize("variant,reference,seq_lens,seed",
                         [("v174", "v171", [959, 300, 0, 64, 1, 33], 1019), ("v174", "v171", [4000, 17, 2900, 1], 1021),
                          ("v175", "v172", [150, 129, 191, 96, 32], 1031), ("v175", "v172", [64, 1, 75, 0, 500], 1033)])
def test_fast_transcendentals_stay_within_rounding_and_repeatable(variant, reference, seq_lens, seed):
    """v174/v175 are v171/v172 with the angles' tanh, the decays' exp and the backward's gate
    sigmoid from the hardware approximations (errors about 1e-7 absolute and 2^-21 relative, far
    below the tf32 rounding of the products): every result within rounding of the library forms'
    (relative L2 distance per tensor at most 5e-3, as the other within-rounding tests; the fp32
    final SSM and K states, which no bf16 rounding hides, at most 1e-4), and bitwise the same
    from call to call."""
    _within_rounding_and_repeatable(variant, reference, seq_lens, seed)


def _within_rounding_and_repeatable(variant, reference, seq_lens, seed):
    case = make_case(seq_lens, seed=seed, device="cuda")
    ref = _run(case, reference)
    got = _run(case, variant)
    again = _run(case, variant)
    for name, a, b, c in zip(RESULT_NAMES, ref, got, again):
        assert torch.equal(b, c), f"{name}: two {variant} calls differ"
        assert torch.isfinite(b.float()).all(), f"{name}: {variant} gives non-finite values"
        dist, absolute = rel_l2(b, a, circular=name == "final_angle_state")
        bound = 1e-4 if name in ("final_ssm_state", "final_k_state") else 5e-3
        assert (dist == 0.0) if absolute else (dist <= bound), f"{name}: {variant} against {reference}, distance {dist:.2e}"
    _check(case, result=got)


@pytest.mark.parametrize("variant,reference,seq_lens,seed",
                         [("v210", "v180", [959, 300, 0, 64, 1, 33], 1523), ("v210", "v180", [4000, 17, 2900, 1], 1531),
                          ("v211", "v181", [150, 129, 191, 96, 32], 1543), ("v211", "v181", [64, 1, 75, 0, 500], 1549)])
def test_flushed_denormals_and_approximate_division_stay_within_rounding_and_repeatable(variant, reference, seq_lens,
                                                                                        seed):
    """v210/v211 are v180/v181 compiled with -ftz=true -prec-div=false (fp32 denormals flushed, fp32
    division to about 2 ulp): every result within rounding of the IEEE forms' (relative L2 distance
    per tensor at most 5e-3; the fp32 final SSM and K states at most 1e-4), right against the float64
    truth, and bitwise the same from call to call."""
    _within_rounding_and_repeatable(variant, reference, seq_lens, seed)


@pytest.mark.parametrize("variant,reference", [("v213", "v210"), ("v214", "v211"), ("v219", "v210"), ("v220", "v211"), ("v222", "v210"), ("v223", "v211")])
def test_wide_sincos_past_8192_rad_stays_within_rounding(variant, reference):
    """Angles of tens of thousands of radians (dt of 100 and angles near tanh's saturation: a chunk
    adds up to 64 x 100 pi): v213/v214's forward, and v219/v220's and v222/v223's forward and backward, reduce them
    by the fast path where v210/v211's call sincosf. Every result within rounding of the reference's, finite, and repeatable."""
    case = make_case([959, 300, 64, 1], seed=1597, device="cuda")
    case["dt"] = torch.full_like(case["dt"], 100.0)
    case["angles"] = torch.full_like(case["angles"], 3.0)
    ref = _run(case, reference)
    got = _run(case, variant)
    assert all(torch.equal(x, y) for x, y in zip(got, _run(case, variant)))
    for name, a, b in zip(RESULT_NAMES, ref, got):
        assert torch.isfinite(b.float()).all(), f"{name}: {variant} gives non-finite values"
        dist, absolute = rel_l2(b, a, circular=name == "final_angle_state")
        assert (dist == 0.0) if absolute else (dist <= 5e-3), f"{name}: {variant} against {reference}, distance {dist:.2e}"


@pytest.mark.parametrize("seq_lens,seed", [([959, 300, 0, 64, 1, 33], 451), ([4000, 17, 2900, 1], 457),
                                           ([150, 129, 191, 96, 32], 461)])
def test_v121_q_side_backward_changes_only_dq_within_rounding(seq_lens, seed):
    """v121 is v119 whose per-head dq and dq_bias partials come from m3_cp_backward64q (the q side of
    the chunk-64 backward on warpgroup products): dq and dq_bias within rounding of v119's (relative
    L2 distance at most 5e-3), every other result bitwise v119's, and bitwise the same from call to
    call."""
    case = make_case(seq_lens, seed=seed, device="cuda")
    ref = _run(case, "v119")
    got = _run(case, "v121")
    again = _run(case, "v121")
    for name, a, b, c in zip(RESULT_NAMES, ref, got, again):
        assert torch.equal(b, c), f"{name}: two v121 calls differ"
        if name in ("dq", "dq_bias"):
            assert torch.isfinite(b.float()).all(), f"{name}: v121 gives non-finite values"
            dist, absolute = rel_l2(b, a)
            assert (dist == 0.0) if absolute else (dist <= 5e-3), f"{name}: v121 against v119, distance {dist:.2e}"
        else:
            assert torch.equal(a, b), f"{name} differs between v119 and v121"


@pytest.mark.parametrize("seq_lens,seed", [([959, 300, 0, 64, 1, 33], 463), ([4000, 17, 2900, 1], 467),
                                           ([150, 129, 191, 96, 32], 479)])
def test_v123_kv_side_backward_changes_only_dk_and_dv_within_rounding(seq_lens, seed):
    """v123 is v121 whose per-head dk, dk_bias partials and dv come from m3_cp_backward64kv (the k/v
    side of the chunk-64 backward on warpgroup products, with its own state-gradient chain): dk,
    dk_bias and dv within rounding of v121's (relative L2 distance at most 5e-3), every other result
    bitwise v121's, and bitwise the same from call to call."""
    case = make_case(seq_lens, seed=seed, device="cuda")
    ref = _run(case, "v121")
    got = _run(case, "v123")
    again = _run(case, "v123")
    for name, a, b, c in zip(RESULT_NAMES, ref, got, again):
        assert torch.equal(b, c), f"{name}: two v123 calls differ"
        if name in ("dk", "dk_bias", "dv"):
            assert torch.isfinite(b.float()).all(), f"{name}: v123 gives non-finite values"
            dist, absolute = rel_l2(b, a)
            assert (dist == 0.0) if absolute else (dist <= 5e-3), f"{name}: v123 against v121, distance {dist:.2e}"
        else:
            assert torch.equal(a, b), f"{name} differs between v121 and v123"


@pytest.mark.parametrize("seq_lens,seed", [([959, 300, 0, 64, 1, 33], 487), ([4000, 17, 2900, 1], 491),
                                           ([150, 129, 191, 96, 32], 499)])
def test_v125_whole_chunk64_backward_is_v123_on_its_sides_and_v89_within_rounding(seq_lens, seed):
    """v125's backward is one kernel (m3_cp_backward64) built from v121's and v123's phases plus the
    dc and dphi terms and v103's tail: the forward's results, dz, dq, dk, dv and the bias gradients
    bitwise v123's (the same device functions on the same operands), dadt, ddt, dtrap, dangles and
    dd within rounding of v89's (relative L2 distance at most 5e-3), bitwise the same from call to
    call."""
    case = make_case(seq_lens, seed=seed, device="cuda")
    sides = _run(case, "v123")
    ref = _run(case, "v89")
    got = _run(case, "v125")
    again = _run(case, "v125")
    for name, a, b, c, d in zip(RESULT_NAMES, ref, got, again, sides):
        assert torch.equal(b, c), f"{name}: two v125 calls differ"
        assert torch.isfinite(b.float()).all(), f"{name}: v125 gives non-finite values"
        if name in ("dadt", "ddt", "dtrap", "dangles", "dd"):
            dist, absolute = rel_l2(b, a)
            assert (dist == 0.0) if absolute else (dist <= 5e-3), f"{name}: v125 against v89, distance {dist:.2e}"
        else:
            assert torch.equal(b, d), f"{name} differs between v123 and v125"


@pytest.mark.parametrize("seq_lens,seed", [([959, 300, 0, 64, 1, 33], 409), ([4000, 17, 2900, 1], 419),
                                           ([150, 129, 191], 421)])
def test_row_major_forward_state_changes_only_the_outputs_rounding(seq_lens, seed):
    """v115's forward reads the row-major states from the workspace and sums its inter-chunk
    product in other groups of eight: the states, and with them every gradient but dz, stay
    bitwise v89's; output and dz (y in other rounding, then bf16) stay within a few ulp."""
    case = make_case(seq_lens, seed=seed, device="cuda")
    ref = _run(case, "v89")
    got = _run(case, "v115")
    for name, a, b in zip(RESULT_NAMES, ref, got):
        if name in ("output", "dz"):
            err = ((a.double() - b.double()).norm() / b.double().norm()).item()
            assert err < 1e-3, f"{name}: v115 differs from v89 by rel-L2 {err:.2e}"
        else:
            assert torch.equal(a, b), f"{name} differs between v89 and v115"


def _raises_before_any_launch(exc, pattern, case, variant):
    """Calls the operator on `case` expecting `exc` matching `pattern`: no m3_ kernel may launch
    (the profiler sees none) and no input may change. Returns pytest's exception info."""
    args = case_args(case)
    snapshot = [a.clone() if a is not None else None for a in args]
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with pytest.raises(exc, match=pattern) as info:
            mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(
                *args, config=None if variant is None else {"variant": variant})
        torch.cuda.synchronize()
    launched = [e.name for e in prof.events() if e.name.startswith("m3_")]
    assert not launched, f"kernels launched for a call that raised {exc.__name__}: {launched}"
    for before, after in zip(snapshot, args):
        assert before is None or torch.equal(before, after)
    return info


@pytest.mark.parametrize("values,fragment", [
    ([1, 959, 1259, 1323], "cu_seqlens[0] = 0"),
    ([0, 959, 900, 1323], "must not decrease"),
    ([0, 959, 1259, 1322], "cu_seqlens[S] = T"),
])
def test_operator_rejects_bad_cuda_cu_seqlens_before_any_launch(values, fragment):
    """The operator reads the boundaries back while it allocates its first results (the copy
    overlaps host work): bad ones still raise before anything is launched, and no input or
    output-to-be is written."""
    case = make_case([959, 300, 64], seed=79, device="cuda")
    case["cu_seqlens"] = torch.tensor(values, dtype=torch.int32, device="cuda")
    _run(make_case([5, 3], seed=1, device="cuda"), "v34")  # kernels loaded outside the profile
    info = _raises_before_any_launch(ValueError, r"'cu_seqlens'", case, "v34")
    assert fragment in str(info.value)


def test_a_bad_argument_after_the_early_read_back_launches_nothing_and_the_next_call_is_right():
    """cu_seqlens starts its copy to the host before the other arguments are checked: a bad one
    among those still raises before any launch and writes no input, and the read-back it dropped
    does not disturb the next call (bitwise the results of a call before it)."""
    good = _case([959, 300, 64], 83)
    before = mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(good))
    bad = dict(good)
    bad["dout"] = good["dout"].float()
    _raises_before_any_launch(TypeError, r"'dout' expected dtype", bad, None)
    again = mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(good))
    for name, x, y in zip(RESULT_NAMES, before, again):
        assert torch.equal(x, y), name


def test_bind_is_the_operator_with_its_config_fixed():
    """mamba3_jit.bind(config) returns bitwise what the operator returns for that config."""
    case = _case([959, 300, 64], 89)
    for config in (None, {"variant": "v248", "chunk": 32, "threads": 256}, "variant=v8"):
        bound = mamba3_jit.bind(config)(*case_args(case))
        plain = mamba3_jit.mamba3_siso_varlen_joint_states_full_vjp(*case_args(case), config=config)
        assert len(bound) == len(plain) == 16
        for name, x, y in zip(RESULT_NAMES, bound, plain):
            assert torch.equal(x, y), (config, name)


def test_wide_reductions_change_only_the_bias_sums_order():
    """v37 reduces the same partials as v35 with more threads: dq and dk keep their per-column
    order (bitwise equal), the bias and dd sums take their rows in another fixed order (equal to
    fp32 rounding), every other result is untouched."""
    case = make_case([959, 300, 0, 64, 1, 33], seed=67, device="cuda")
    ref = _run(case, "v35")
    got = _run(case, "v37")
    reordered = {"dq_bias", "dk_bias", "dd"}
    for name, a, b in zip(RESULT_NAMES, ref, got):
        if name in reordered:
            # Element-wise tolerances would fail where a sum of large terms cancels; the tensor's
            # relative L2 distance is what fp32 reordering bounds.
            dist = torch.linalg.vector_norm((b - a).double()) / torch.linalg.vector_norm(a.double()).clamp_min(1e-30)
            assert dist <= 1e-5, f"{name}: v37 against v35, relative L2 distance {dist:.2e}"
        else:
            assert torch.equal(a, b), f"{name} differs between v35 and v37"


@pytest.mark.parametrize("variant", ["v101", "v103", "v105", "v107", "v109", "v111", "v113", "v117"])
@pytest.mark.parametrize("heads", [1, 5, 32, 40])
def test_overlapped_reduce_waits_for_every_head(variant, heads):
    """The head sums of v101 on wait for a count of H backward CTAs per chunk: with other head
    counts, and with a call that reuses the workspace (the counts zeroed again, the lines dropped
    from L2 written again), the results stay bitwise v95's."""
    case = make_case([959, 300, 0, 64, 1, 33], seed=313, H=heads, device="cuda")
    ref = _run(case, "v95")
    for _ in range(2):
        got = _run(case, variant)
        for name, a, b in zip(RESULT_NAMES, ref, got):
            assert torch.equal(a, b), f"H = {heads}: {name} differs between v95 and {variant}"


@pytest.mark.parametrize("variant,heads", [("v53", 32), ("v53", 6), ("v53", 1), ("v55", 32), ("v55", 12)])
def test_head_clusters_change_only_the_order_of_the_dq_dk_sums(variant, heads):
    """v53 and v55 sum dq and dk over clusters of 4 or 8 heads (2 for H = 6, 1 for H = 1: the
    largest power of two that divides H) in the backward, then over the clusters: another fixed
    order of the same fp32 sums, so dq and dk equal v47's to fp32 rounding, and every other
    result is bitwise v47's."""
    case = make_case([959, 300, 0, 64, 1, 33], seed=107, H=heads, device="cuda")
    ref = _run(case, "v47")
    got = _run(case, variant)
    for name, a, b in zip(RESULT_NAMES, ref, got):
        if name in ("dq", "dk"):
            dist = torch.linalg.vector_norm((b - a).double()) / torch.linalg.vector_norm(a.double()).clamp_min(1e-30)
            assert dist <= 1e-3, f"{name}: {variant} against v47, relative L2 distance {dist:.2e}"
        else:
            assert torch.equal(a, b), f"{name} differs between v47 and {variant}"


@pytest.mark.parametrize("variant,fast",
                         [("v9", "v7"), ("v12", "v11"), ("v14", "v13"), ("v16", "v15"), ("v18", "v17"), ("v20", "v19"), ("v22", "v21"), ("v24", "v23"), ("v26", "v25"), ("v28", "v27"), ("v30", "v29"), ("v32", "v31"), ("v34", "v33"), ("v36", "v35"), ("v38", "v37"), ("v40", "v39"), ("v42", "v41"), ("v44", "v43"), ("v46", "v45"), ("v48", "v47"), ("v50", "v49"), ("v52", "v51"), ("v54", "v53"), ("v56", "v55"), ("v58", "v57"), ("v60", "v59"), ("v62", "v61"), ("v64", "v63"), ("v66", "v65"), ("v68", "v67"), ("v70", "v69"), ("v72", "v71"), ("v74", "v73"), ("v76", "v75"), ("v78", "v77"), ("v80", "v79"), ("v82", "v81"), ("v84", "v83"), ("v86", "v85"), ("v88", "v87"), ("v90", "v89"), ("v92", "v91"), ("v94", "v93"), ("v96", "v95"), ("v98", "v97"), ("v100", "v99"), ("v102", "v101"), ("v104", "v103"), ("v106", "v105"), ("v108", "v107"), ("v110", "v109"), ("v112", "v111"), ("v114", "v113"), ("v116", "v115"), ("v118", "v117"), ("v120", "v119"), ("v122", "v121"), ("v124", "v123"), ("v126", "v125"), ("v128", "v127"), ("v130", "v129"), ("v132", "v131"), ("v134", "v133"), ("v136", "v135"), ("v137", "v135"), ("v139", "v138"), ("v141", "v140"), ("v143", "v142"), ("v145", "v142"), ("v147", "v146"), ("v149", "v148"), ("v151", "v150"), ("v153", "v152"), ("v155", "v148"), ("v157", "v156"), ("v160", "v158"), ("v163", "v161"), ("v166", "v164"), ("v170", "v168"), ("v173", "v171"), ("v176", "v174"), ("v179", "v177"), ("v182", "v180"), ("v185", "v183"), ("v188", "v186"), ("v191", "v189"), ("v194", "v192"), ("v197", "v195"), ("v200", "v198"), ("v203", "v201"), ("v206", "v204"), ("v209", "v207"), ("v212", "v210"), ("v215", "v213"), ("v218", "v216"), ("v221", "v219"), ("v224", "v222"), ("v226", "v225"), ("v228", "v227"), ("v230", "v229"), ("v233", "v231"), ("v234", "v231"), ("v239", "v237"), ("v242", "v240"), ("v245", "v243"), ("v248", "v246"), ("v251", "v249"), ("v253", "v252"), ("v255", "v254")])
def test_dispatch_runs_fast_kernels_up_to_4096_tokens_and_v8_beyond(variant, fast):
    """The dispatch-only variants: bitwise their fast variant while every sequence has at most 4096
    tokens, bitwise v8 (about fp32-exact tile products) once one is longer."""
    for seq_lens, twin in (([4096, 300, 1], fast), ([4097, 64], "v8")):
        case = make_case(seq_lens, seed=33, device="cuda")
        got = _run(case, variant)
        want = _run(case, twin)
        for name, a, b in zip(RESULT_NAMES, got, want):
            assert torch.equal(a, b), f"{seq_lens}: {name} differs between {variant} and {twin}"


@pytest.mark.parametrize("variant,wide,few", [("v137", "v135", "v103"), ("v139", "v138", "v103"),
                                              ("v141", "v140", "v103"), ("v143", "v142", "v103"),
                                              ("v145", "v142", "v144"), ("v147", "v146", "v103"),
                                              ("v149", "v148", "v103"), ("v151", "v150", "v103"),
                                              ("v153", "v152", "v103"), ("v155", "v148", "v154"),
                                              ("v157", "v156", "v154"), ("v160", "v158", "v159"), ("v163", "v161", "v162"),
                                              ("v166", "v164", "v165"), ("v170", "v168", "v169"),
                                              ("v173", "v171", "v172"), ("v176", "v174", "v175"), ("v179", "v177", "v178"), ("v182", "v180", "v181"), ("v185", "v183", "v184"), ("v188", "v186", "v187"), ("v191", "v189", "v190"), ("v194", "v192", "v193"), ("v197", "v195", "v196"), ("v200", "v198", "v199"), ("v203", "v201", "v202"), ("v206", "v204", "v205"), ("v209", "v207", "v208"), ("v212", "v210", "v211"), ("v215", "v213", "v214"), ("v218", "v216", "v217"), ("v221", "v219", "v220"), ("v224", "v222", "v223"), ("v226", "v225", "v223"), ("v228", "v227", "v223"), ("v230", "v229", "v223"), ("v233", "v231", "v232"), ("v234", "v231", "v232"), ("v239", "v237", "v238"), ("v242", "v240", "v241"), ("v245", "v243", "v244"), ("v248", "v246", "v247"), ("v251", "v249", "v250"), ("v253", "v252", "v247"), ("v255", "v254", "v247")])
def test_waves_pickers_run_32_token_kernels_where_the_chunk64_forward_makes_few_waves(variant, wide, few):
    """v137 and the later waves pickers pick their kernels by how many waves of resident CTAs the
    chunk-64 forward's jobs would make: below two they run their 32-token set (v103's, v144's or
    v154's: bitwise), from two the wide ones (the dispatch test above, 2,272 jobs).
    150 tokens in two sequences make (150 // 64 + 2) * 32 = 128 jobs, under two waves wherever at
    least one CTA fits on each of more than 64 SMs."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    if 128 >= 2 * sms:
        pytest.skip(f"{sms} SMs: 128 jobs may make two waves here")
    case = make_case([100, 50], seed=35, device="cuda")
    got, want, other = _run(case, variant), _run(case, few), _run(case, wide)
    for name, a, b in zip(RESULT_NAMES, got, want):
        assert torch.equal(a, b), f"{name} differs between {variant} and {few}"
    assert any(not torch.equal(a, b) for a, b in zip(got, other)), f"{variant} ran {wide}'s kernels"


def test_v234_runs_the_wide_kernels_from_one_and_a_half_waves():
    """Run 148's m1 (750 tokens in three sequences): (750 // 64 + 3) * 32 = 448 chunk-64 forward
    jobs, 1.70 waves of 264 resident CTAs. v234 runs v231's kernels there (bitwise), v233 v232's."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    if not 448 / 2 < 2 * sms < 448 / 1.5:
        pytest.skip(f"{sms} SMs: 448 jobs do not make between 1.5 and 2 waves of two CTAs an SM here")
    case = make_case([200, 300, 250], seed=4801, device="cuda")
    got, wide, few, v233 = _run(case, "v234"), _run(case, "v231"), _run(case, "v232"), _run(case, "v233")
    for name, a, b, c, d in zip(RESULT_NAMES, got, wide, v233, few):
        assert torch.equal(a, b), f"{name} differs between v234 and v231"
        assert torch.equal(c, d), f"{name} differs between v233 and v232"


def _assert_moves_only(case, reference, variant, moved, bound):
    """variant against reference on one case: the results named in `moved` within `bound` (relative
    L2), every other result bitwise the reference's, all within the contract's tolerance of the
    float64 truth, and two calls of variant bitwise the same."""
    ref = _run(case, reference)
    got = _check(case, variant=variant)
    again = _run(case, variant)
    for name, a, b, c in zip(RESULT_NAMES, ref, got, again):
        assert torch.equal(b, c), f"{name}: two {variant} calls differ"
        if name in moved:
            dist, absolute = rel_l2(b, a)
            assert (dist == 0.0) if absolute else (dist <= bound), f"{name}: {variant} against {reference}, distance {dist:.2e}"
        else:
            assert torch.equal(a, b), f"{name} differs between {reference} and {variant}"


# The results whose sums the hand-off carries (v237 on) reorder: the angle and decay carries and
# the one-token shift of dt and trap.
HANDOFF_RESULTS = ("dadt", "ddt", "dtrap", "dangles")


@pytest.mark.parametrize("reference,variant", [("v231", "v237"), ("v232", "v238"), ("v231", "v240"),
                                               ("v232", "v241"), ("v231", "v243"), ("v232", "v244"),
                                               ("v231", "v246"), ("v232", "v247")])
@pytest.mark.parametrize("seq_lens,seed", [([959, 300, 0, 64, 1, 33], 1901), ([4000, 17, 2900, 1], 1907),
                                           ([150, 129, 191, 96, 32], 1913), ([33, 32, 31, 65, 64], 1931)])
def test_handoff_carries_change_only_the_carried_sums_within_rounding(reference, variant, seq_lens, seed):
    """v237 and v238 are v231 and v232 whose backward takes the angle and decay carries from the
    successor's hand-off (cross(G, S) + K, sum G S) and combines the one-token shift at a chunk
    boundary by whichever side comes second; v240 and v241 the same sums, polled words instead of
    flags, the boundary's shift written by the job before it; v243 and v244 with the sums formed in
    the update loop; v246 and v247 with the record copied into shared memory during the epilogue.
    dadt, ddt, dtrap and dangles within rounding of the base's (relative L2 at most 5e-3) and
    checked against the float64 truth, every other result bitwise the base's, and bitwise the same
    from call to call. The last mix puts chunk boundaries at and next to every sequence's end
    (32-token chunks)."""
    _assert_moves_only(_case(seq_lens, seed), reference, variant, HANDOFF_RESULTS, 5e-3)


@pytest.mark.parametrize("variant", ["v240", "v243", "v246"])
def test_polled_handoff_survives_a_dt_holding_the_unwritten_mark(variant):
    """The polled hand-off (v240 on) fills its records with one NaN payload (0x7fbadbad) and waits
    for every word it reads to differ from it. dt is an input and may hold that very NaN; it must
    not reach a record (a job would wait for it forever). With the mark in dt at chunk boundaries
    and at a sequence's first token, the call returns, the NaN reaches the results, and the next
    call on clean inputs is right."""
    case = make_case([100, 70], seed=1933, device="cuda")
    marked = dict(case)
    dt = case["dt"].clone()
    for t in (0, 32, 64, 100, 132):
        dt.view(torch.int32)[..., t] = 0x7FBADBAD
    assert torch.isnan(dt[..., 32]).all(), "the mark is a NaN payload"
    marked["dt"] = dt
    got = _run(marked, variant)
    torch.cuda.synchronize()
    assert any(torch.isnan(x.float()).any() for x in got), "the NaN dt reached no result"
    _check(_case([100, 70], 1933), variant=variant)


# The results the chunk-64 forward computes, which v252's half states cannot move.
FORWARD_RESULTS = ("output", "final_angle", "final_ssm", "final_k", "final_v")
HALF_HAND_OFFS = [("v246", "v252", tuple(n for n in RESULT_NAMES if n not in FORWARD_RESULTS)),
                  ("v252", "v254", ("dq", "dk"))]


@pytest.mark.parametrize("reference,variant,moved", HALF_HAND_OFFS, ids=[v for _, v, _ in HALF_HAND_OFFS])
@pytest.mark.parametrize("seq_lens,seed", [([959, 300, 0, 64, 1, 33], 2003), ([4000, 17, 2900, 1], 2011),
                                           ([150, 129, 191, 96, 32], 2017), ([33, 32, 31, 65, 64], 2027)])
def test_half_hand_offs_move_only_what_they_carry_within_rounding(reference, variant, moved, seq_lens, seed):
    """v252 is v246 whose chunk-64 forward hands the backward its entering states in half, a power of
    two a 16 x 64 block: the forward's results stay bitwise v246's, every gradient may move. v254 is
    v252 whose backward hands the reduce its per-head dq and dk rows in half, a power of two a row:
    only dq and dk may move (the bias sums take the fp32 rows). What moves stays within 2e-3
    (relative L2) of the variant before, everything within the contract's tolerance of the float64
    truth, and two calls are bitwise the same."""
    _assert_moves_only(_case(seq_lens, seed), reference, variant, moved, 2e-3)


@pytest.mark.parametrize("reference,variant,seed", [("v246", "v252", 2029), ("v252", "v254", 2069)])
@pytest.mark.parametrize("factor", [2.0 ** 16, 2.0 ** -20])
def test_half_hand_offs_keep_their_range_at_any_input_scale(reference, variant, seed, factor):
    """v, dout and the final-state gradients are the inputs whose scale the model leaves free. At 2^16
    times the generator's, v252's states and v254's per-head rows reach past half's 65504, at 2^-20
    times into its subnormals; the blocks' and rows' powers of two keep every result within 2e-3 of
    the variant before (fp32 hand-offs) either way."""
    case = make_case([959, 300, 64, 1, 33], seed=seed, device="cuda")
    for name in ("v", "dout", "dfinal_ssm", "dfinal_k", "dfinal_v"):
        case[name] = (case[name] * factor).to(case[name].dtype)
    ref, got = _run(case, reference), _run(case, variant)
    for name, a, b in zip(RESULT_NAMES, ref, got):
        assert torch.isfinite(b.float()).all(), f"{name}: {variant} not finite at scale {factor}"
        dist, absolute = rel_l2(b, a)
        assert (dist == 0.0) if absolute else (dist <= 2e-3), f"{name}: {variant} against {reference} at scale {factor}: {dist:.2e}"


@pytest.mark.parametrize("variant,wide", [("v239", "v237"), ("v242", "v240"), ("v245", "v243"),
                                          ("v248", "v246"), ("v251", "v249"), ("v253", "v252"),
                                          ("v255", "v254")])
def test_handoff_pickers_run_the_wide_kernels_from_one_and_a_half_waves(variant, wide):
    """v239, v242, v245, v248 and v251 pick as v234 does (run 148's m1, 1.70 waves of the chunk-64
    forward's jobs): v237's, v240's, v243's, v246's and v249's kernels there, bitwise, and v238's,
    v241's, v244's, v247's and v250's on fewer waves (the waves pickers' test)."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    if not 448 / 2 < 2 * sms < 448 / 1.5:
        pytest.skip(f"{sms} SMs: 448 jobs do not make between 1.5 and 2 waves of two CTAs an SM here")
    case = make_case([200, 300, 250], seed=4801, device="cuda")
    for name, a, b in zip(RESULT_NAMES, _run(case, variant), _run(case, wide)):
        assert torch.equal(a, b), f"{name} differs between {variant} and {wide}"


COTANGENTS = ("dout", "dfinal_angle", "dfinal_ssm", "dfinal_k", "dfinal_v")


@pytest.mark.parametrize("variant", ["v5", "v9", "v10", "v11", "v12", "v13", "v15", "v17", "v19", "v21", "v23", "v25", "v27", "v29", "v31", "v33", "v35", "v37", "v39", "v41", "v43", "v45", "v47", "v49", "v51", "v53", "v55", "v57", "v59", "v61", "v63", "v65", "v67", "v69", "v71", "v73", "v75", "v77", "v79", "v81", "v83", "v85", "v87", "v89", "v91", "v93", "v95", "v97", "v99", "v101", "v103", "v105", "v107", "v109", "v111", "v113", "v115", "v117", "v119", "v121", "v123", "v125", "v127", "v129", "v131", "v133", "v135", "v138", "v140", "v142", "v144", "v146", "v148", "v150", "v152", "v154", "v156", "v158", "v159", "v161", "v162", "v164", "v165", "v168", "v169", "v171", "v172", "v174", "v175", "v177", "v178", "v180", "v181", "v183", "v184", "v186", "v187", "v189", "v190", "v192", "v193", "v195", "v196", "v198", "v199", "v201", "v202", "v204", "v205", "v207", "v208", "v210", "v211", "v213", "v214", "v216", "v217", "v219", "v220", "v222", "v223", "v225", "v227", "v229", "v231", "v232", "v237", "v238", "v240", "v241", "v243", "v244", "v246", "v247", "v249", "v250", "v252", "v254"])
def test_forward_only_and_missing_cotangents(variant):
    """The forward-only op returns bitwise the joint op's five forward results, and a cotangent
    passed as None gives bitwise what a zero tensor gives."""
    case = make_case([959, 300, 64, 1, 0], seed=34, device="cuda")
    args = list(case_args(case))
    cfg = mamba3_jit.config_string({"variant": variant})
    forward = _native_op("forward")(*args[:12], cfg)
    joint = _native_op("fwd_vjp")(*args, cfg)
    assert len(forward) == 5
    for name, a, b in zip(RESULT_NAMES, forward, joint):
        assert torch.equal(a, b), f"forward-only {name} differs from the joint op's"
    for i, name in enumerate(COTANGENTS):
        with_none = list(args)
        with_none[12 + i] = None
        with_zero = list(args)
        with_zero[12 + i] = torch.zeros_like(args[12 + i])
        got = _native_op("fwd_vjp")(*with_none, cfg)
        want = _native_op("fwd_vjp")(*with_zero, cfg)
        for rname, a, b in zip(RESULT_NAMES, got, want):
            assert torch.equal(a, b), f"{name}=None: {rname} differs from a zero {name}"
