"""Run 147's chains model with the SM shared between its jobs, as run 151 measured it.

Run 147's model (methods/results/run147/chains_model.py) gave every job a fixed latency per slot,
whether its SM held one job or two. Run 151 timed a job alone on its SM (v235, v236): about two
thirds of a paired job's time. Here each of the 132 SMs holds up to two jobs; a job's work is one
paired latency, done at rate 1 while another job on its SM is running and at 1 / lone (lone =
lone latency / paired latency) while it runs alone; a job waiting on its chain neighbour's hand-off
holds its slot without slowing the other. Jobs take slots in ticket order (aligned ends, as v231's
tables), each on the SM with the fewest jobs; a job passes its `pre` point only after its
predecessor in the chain has passed `pre + upd` (the hand-off). Time steps of 0.05 us.

    python3 methods/results/run151/sharing_model.py [--run148]

prints, per visible case, the modelled and measured (run 151) backward and chunk-64 forward at two
CTAs an SM (v231) and at one (v235, v236), the model's latencies fitted from c01 alone; with
--run148, the same latencies against run 148's panel of small mixes (v231's kernels, another
process and machine).
"""
import json
import math
import sys
from pathlib import Path

SMS, HEADS, DT = 132, 32, 0.05


def tickets(lens, chunk, kind="b"):
    chunks = [math.ceil(n / chunk) for n in lens]
    most = max(chunks)
    pairs = sorted(((r + most - c, s), s, r) for s, c in enumerate(chunks) for r in range(c))
    return [(kind, s, h, r) for _, s, r in pairs for h in range(HEADS)]


def chain_wait(job, par):
    """A job of round r > 0 parks at `pre` until its chain predecessor has handed on."""
    kind, s, h, r = job
    return (par[kind][2], (kind, s, h, r - 1)) if r > 0 else None


def simulate(order, par, per_sm, wait=chain_wait, mix=1.0, on_done=None):
    """The time the jobs of `order` (kind, sequence, head, round), in ticket order, take on the SMs.
    par[kind] = (paired, lone, pre, upd): latencies (us) and the hand-off points (us of paired
    work). wait(job, par) gives (progress, key): the job parks at that progress until key is in the
    handed set, where each job adds itself once past pre + upd (and on_done(job, handed) may add
    more when it ends). A job runs at 1 beside a job of its kind, paired / lone alone, and at
    min(mix, paired / lone) beside one of another kind."""
    handed = set()
    load = [0] * SMS  # resident jobs per SM
    running = []  # [progress, sm, job]
    nxt, t = 0, 0.0
    while nxt < len(order) or running:
        # Fill free slots in ticket order, each on the least loaded SM.
        while nxt < len(order):
            sm = min(range(SMS), key=load.__getitem__)
            if load[sm] >= per_sm:
                break
            load[sm] += 1
            running.append([0.0, sm, order[nxt]])
            nxt += 1
        # Which jobs progress this step: not those parked behind what they wait for.
        kinds = [[] for _ in range(SMS)]
        moving = []
        for j in running:
            w = wait(j[2], par)
            if w is None or j[0] < w[0] or w[1] in handed:
                kinds[j[1]].append(j[2][0])
                moving.append(j)
        for j in moving:
            paired, lone, pre, upd = par[j[2][0]]
            ks = kinds[j[1]]
            rate = paired / lone if len(ks) == 1 else (1.0 if ks[0] == ks[1] else min(mix, paired / lone))
            j[0] += rate * DT
            if j[0] >= pre + upd:
                handed.add(j[2])
        t += DT
        done = [j for j in running if j[0] >= par[j[2][0]][0]]
        for j in done:
            load[j[1]] -= 1
            running.remove(j)
            if on_done:
                on_done(j[2], handed)
    return t


def makespan(lens, chunk, paired, lone, pre, upd, per_sm):
    """One kernel's jobs: paired, a job's latency with two jobs running on its SM (us); lone, alone."""
    return simulate(tickets(lens, chunk), {"b": (paired, lone, pre, upd)}, per_sm)


# Per kind: chunk, paired and lone latency (us), pre and upd (us of paired work), the kernel.
KINDS = [("backward", 32, 29.5, 19.9, 6.0, 3.0, "m3_cp_backward"),
         ("forward64", 64, 20.0, 14.0, 8.0, 2.0, "m3_cp_forward64")]


def run148():
    bench = json.loads((Path(__file__).parents[1] / "run148" / "bench.json").read_text())
    for c in bench["cases"]:
        row = [f"{c['name']} {c['seq_lens']}"]
        for name, chunk, paired, lone, pre, upd, kernel in KINDS:
            two = makespan(c["seq_lens"], chunk, paired, lone, pre, upd, 2)
            m2 = c["solvers"]["v231"]["kernels"][kernel]["us_per_iter"]
            row.append(f"{name} {two:6.1f} (measured {m2:6.1f})")
        print("  ".join(row), flush=True)


def main():
    if "--run148" in sys.argv:
        return run148()
    root = Path(__file__).resolve().parents[3]
    cases = json.loads((root / "python" / "mamba3_jit" / "data" / "visible_cases.json").read_text())["cases"]
    bench = json.loads((Path(__file__).parent / "bench.json").read_text())
    measured = {c["name"]: c["solvers"] for c in bench["cases"]}
    # Latencies from c01 alone (run 151): the backward 4,768 jobs in 533.6 us paired (18.06 waves of
    # 264) and 719.3 us lone (36.12 waves of 132); the chunk-64 forward 2,400 jobs in 192.7 and 255.0.
    for c in cases:
        row = [f"{c['name']}"]
        for name, chunk, paired, lone, pre, upd, kernel in KINDS:
            two = makespan(c["seq_lens"], chunk, paired, lone, pre, upd, 2)
            one = makespan(c["seq_lens"], chunk, paired, lone, pre, upd, 1)
            m2 = measured[c["name"]]["v231"]["kernels"][kernel]["us_per_iter"]
            m1 = measured[c["name"]]["v235" if name == "backward" else "v236"]["kernels"][kernel]["us_per_iter"]
            row.append(f"{name} two {two:6.1f} (measured {m2:6.1f}) one {one:6.1f} ({m1:6.1f})")
        print("  ".join(row), flush=True)


if __name__ == "__main__":
    main()
