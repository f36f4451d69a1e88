"""Runs 122 to 125: the backward's kernel time (m3_cp_backward, us) taken apart by ablation.

Reads the bench JSON files of the four runs (run 122's as they came back, the others from their
archives) and prints, per visible case, each block's share: the difference between two builds that
differ by one switch. Usage: python3 methods/results/run125/ablation_table.py
"""
import io
import json
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def runs():
    out = {}
    for name in ("full", "noepi", "none"):
        out["122/" + name] = json.loads((HERE / "run122" / f"bench_{name}.json").read_text())
    for run in ("123", "124", "125"):
        with tarfile.open(HERE / f"run{run}" / f"run{run}.tgz") as tar:
            for member in tar.getmembers():
                if member.name.endswith(".json"):
                    name = Path(member.name).stem.removeprefix("bench_")
                    out[f"{run}/{name}"] = json.load(io.TextIOWrapper(tar.extractfile(member)))
    return out


def backward_us(result, i):
    return result["cases"][i]["kernels"]["m3_cp_backward"]["us_per_iter"]


def main():
    r = runs()
    # (block, build with it, build without it); each pair from one run (one machine), except the
    # state traffic's, whose two builds ran in runs 122 and 123.
    blocks = [("tile products", "123/full", "123/noprod"),
              ("epilogue", "122/full", "122/noepi"),
              ("per-token tail", "123/full", "123/notail"),
              ("state traffic", "122/none", "123/nonestate"),
              ("prepare (staging)", "124/skel", "124/skelnoprep"),
              ("intra's other work", "125/bare", "125/nointra"),
              ("flag waits", "125/bare", "125/nowait"),
              ("what is left (empty job)", "125/empty", None),
              ("(angles, across blocks)", "124/full", "124/noang")]  # not added: inside the others
    cases = [c["name"] for c in r["124/full"]["cases"]]
    print(f"{'block':28s}" + "".join(f"{c:>14s}" for c in cases))
    fulls = [[backward_us(r[k], i) for k in ("122/full", "123/full", "124/full")] for i in range(len(cases))]
    print(f"{'whole backward (3 runs)':28s}" + "".join(f"{min(f):6.1f}-{max(f):6.1f} " for f in fulls))
    summed = [0.0] * len(cases)
    for name, a, b in blocks:
        row = f"{name:28s}"
        for i in range(len(cases)):
            full = sum(fulls[i]) / 3
            d = backward_us(r[a], i) - (backward_us(r[b], i) if b else 0.0)
            if not name.startswith("("):
                summed[i] += d
            row += f"{d:7.1f} ({100 * d / full:3.0f}%)"
        print(row)
    # The bias partials were not taken out alone (run 125's "empty" lacks them too), and the blocks
    # need not add up exactly: what the sum misses of the whole.
    row = f"{'rest (bias partials, ...)':28s}"
    for i in range(len(cases)):
        full = sum(fulls[i]) / 3
        row += f"{full - summed[i]:7.1f} ({100 * (full - summed[i]) / full:3.0f}%)"
    print(row)


if __name__ == "__main__":
    main()
