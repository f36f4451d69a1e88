"""Two calls of a solver on one case; ncu profiles the second call's forward kernel."""
import sys
sys.path.insert(0, "python")
import torch
from mamba3_jit import harness as Hn, reference as R
case = Hn.load_cases(name_filter=sys.argv[1])[0]
args = R.case_args(Hn.draw(case, "cuda"))
fn = Hn.load_solver(sys.argv[2])
for _ in range(2):
    fn(*args)
    torch.cuda.synchronize()
print("done", case["name"])
