"""The thirty-eighth session's per-product precision sweep (per_product_c00_c06_L4096.json).

Base mix: every product with all three bf16 terms except the intra site (M v and its two backward
products, plain bf16). Then each of the other twelve products (four sites x forward, g @ b^T,
a^T @ g) is set in turn to plain bf16, bf16x2a and bf16x2b; the intra site's three, in turn, to
bf16x3. Run from the repository root (about 30 minutes on a CPU, most of it the 4096-token case):
    python3 methods/results/precision/per_product_sweep.py OUT.json
The core mixes of per_product_core_mixes.json were run with methods/precision_study.py directly;
their format strings are the table's keys.
"""
import subprocess
import sys

BASE = [["bf16x3"] * 3, ["bf16"] * 3, ["bf16x3"] * 3, ["bf16x3"] * 3]  # scores, intra, state, inter
INTRA = 1


def mix(cfg):
    return "mix=" + "/".join("|".join(p) for p in cfg)


def formats():
    out = [mix(BASE)]
    for site in range(4):
        for product in range(3):
            for f in (["bf16x3"] if site == INTRA else ["bf16", "bf16x2a", "bf16x2b"]):
                cfg = [list(p) for p in BASE]
                cfg[site][product] = f
                out.append(mix(cfg))
    return out


if __name__ == "__main__":
    subprocess.run(["python3", "methods/precision_study.py", "--cases", "c00,c06", "--long", "4096",
                    "--formats", ",".join(formats()), "--json", sys.argv[1]], check=True)
