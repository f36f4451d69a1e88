"""Summarise run 86's ncu raw CSVs: where each kernel's L1 data-pipe (LSU) wavefronts go.

Usage: python3 wavefronts.py fwd_v104_raw.csv fwd_v116_raw.csv bwd_v104_raw.csv
"""
import csv
import sys

SHOWN = [
    ("gpu__time_duration.sum", "duration (profiler clocks)"),
    ("sm__warps_active.avg.per_cycle_active", "warps active per SM"),
    ("smsp__average_warp_latency_per_inst_issued.ratio", "cycles per issued instruction (warp)"),
    ("l1tex__data_pipe_lsu_wavefronts.sum.pct_of_peak_sustained_elapsed", "L1 LSU data-pipe wavefronts, % of peak"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed", "  of which shared, % of peak"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum", "shared wavefronts"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "  of which bank conflicts"),
    ("l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_ld.sum", "global load wavefronts (tag stage)"),
    ("l1tex__t_output_wavefronts_pipe_lsu_mem_global_op_st.sum", "global store wavefronts (tag stage)"),
    ("l1tex__t_output_wavefronts_pipe_lsu_mem_local_op_ld.sum", "local load wavefronts"),
    ("l1tex__t_output_wavefronts_pipe_lsu_mem_local_op_st.sum", "local store wavefronts"),
    ("sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_elapsed", "LSU instructions, % of peak"),
    ("smsp__inst_executed.sum", "warp instructions"),
    ("launch__grid_size", "CTAs (jobs)"),
]


def load(path):
    rows = list(csv.reader(open(path)))
    return dict(zip(rows[0], rows[2])), dict(zip(rows[0], rows[1]))


tables = [(p, *load(p)) for p in sys.argv[1:]]
print(f"{'metric':45s}" + "".join(f"{p.split('_raw')[0]:>18s}" for p, _, _ in tables))
for key, label in SHOWN:
    cells = []
    for _, values, units in tables:
        raw = values.get(key, "-")
        cells.append(f"{raw:>18s}")
    print(f"{label:45s}" + "".join(cells))
