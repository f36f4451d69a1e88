"""Run 92's localiser: v119's forward on the GPU against the CPU model of its job
(methods/bank_model/forward64_model.py) on one small case, per sequence, head, job and half, so that
a failing GPU test says which part of the job went wrong (the first job of a sequence: staging and
products; later jobs only: the chain; second halves only: Z_mid or the yb products)."""
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "python"))
import mamba3_jit  # noqa: E402
from mamba3_jit.reference import case_args, make_case  # noqa: E402
from mamba3_jit.training import _native_op  # noqa: E402

spec = importlib.util.spec_from_file_location("forward64_model", ROOT / "methods/bank_model/forward64_model.py")
model = importlib.util.module_from_spec(spec)
spec.loader.exec_module(model)

lens, heads = [150, 33, 64, 1, 0, 97], 2
case = make_case(lens, seed=7, H=heads)
want, _, _ = model.model_forward(case)
args = [t.cuda() for t in case_args(case)]
got = _native_op("forward")(*args[:12], mamba3_jit.config_string({"variant": "v119"}))
torch.cuda.synchronize()
out = got[0][0].float().cpu().numpy()
print("final_ssm rel-L2", model.rel(got[2].cpu().numpy(), want["final_ssm"]),
      " final_k", model.rel(got[3].cpu().numpy(), want["final_k"]),
      " final_v", model.rel(got[4].float().cpu().numpy(), want["final_v"]))
cu = case["cu_seqlens"].tolist()
for s in range(len(lens)):
    for h in range(heads):
        for j in range((lens[s] + 63) // 64):
            for half in range(2):
                a = cu[s] + 64 * j + 32 * half
                b = min(cu[s + 1], a + 32)
                if a >= b:
                    continue
                err = model.rel(out[a:b, h], want["output"][a:b, h])
                flag = "" if err < 1e-2 else "   <-- WRONG"
                print(f"seq {s} head {h} job {j} half {half} tokens {a}..{b - 1}: output rel-L2 {err:.2e}{flag}")
