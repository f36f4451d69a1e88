"""Run 137's four backward profiles side by side: stall ratios (warps stalled per issue), spill
sectors and the shared wavefronts, from the raw pages in profiles.tgz.
Usage: python3 methods/results/run137/stalls.py (unpacks profiles.tgz into a temporary folder);
another run's profiles: python3 methods/results/run137/stalls.py methods/results/run138 v182 v194;
a profile of a third run beside them as FOLDER:vN (methods/results/run140:v182)."""
import csv
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parent
VARIANTS = sys.argv[2:] if len(sys.argv) > 2 else ["v182", "v185", "v188", "v191"]
EXTRA = ["smsp__cycles_active.avg", "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
         "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
         # run 140: where the spill loads and the global loads are served
         "l1tex__t_sector_pipe_lsu_mem_local_op_ld_hit_rate.pct",
         "l1tex__t_sector_pipe_lsu_mem_global_op_ld_hit_rate.pct", "lts__t_sector_hit_rate.pct"]


def raw(folder, v):
    rows = list(csv.reader(open(folder / f"{v}_raw.csv")))
    return dict(zip(rows[0], rows[-1]))


pages = {}
with tempfile.TemporaryDirectory() as tmp:
    unpacked = {}  # each run's profiles.tgz once, however many of its variants are read
    for spec in VARIANTS:
        folder, _, v = spec.rpartition(":")
        if folder not in unpacked:
            unpacked[folder] = Path(tmp) / str(len(unpacked))
            with tarfile.open((Path(folder).resolve() if folder else HERE) / "profiles.tgz") as tar:
                tar.extractall(unpacked[folder])
        pages[spec] = raw(unpacked[folder], v)
print(f"{'metric':64s} " + " ".join(f"{v:>10s}" for v in VARIANTS))
names = [k for k in pages[VARIANTS[0]] if "average_warps_issue_stalled" in k and k.endswith("per_issue_active.ratio")]
for k in names + EXTRA:
    vals = [float(pages[v].get(k, "nan").replace(",", "") or "nan") for v in VARIANTS]
    if k.endswith(".pct") or not max(vals) < 0.05:  # rates, and NaN (a metric the page lacks), print too
        print(f"{k[-64:]:64s} " + " ".join(f"{x:10.2f}" for x in vals))
