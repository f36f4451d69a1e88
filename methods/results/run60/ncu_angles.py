"""Two calls each of v80 and v82 on one case; ncu profiles the second round's angle kernels."""
import sys
sys.path.insert(0, "python")
import torch
from mamba3_jit import harness as Hn, reference as R
case = Hn.load_cases(name_filter=sys.argv[1])[0]
args = R.case_args(Hn.draw(case, "cuda"))
fns = [Hn.load_solver(f"methods/versions/{v}/solver.py") for v in ("v84", "v86")]
for _ in range(2):
    for fn in fns:
        fn(*args)
        torch.cuda.synchronize()
print("done", case["name"])
