"""The official WEINCE loss on fixed inputs (issue 39; docs/results/records/official/weince.md).

Run beside the official module, unpatched:
    git -C /work/.mirror/hsme98+weince/repo show 49485f3:simclr/modules/nt_xent_hard_select.py > nt_xent_hard_select.py
    python run_official.py > official_values.txt
Prints, per dtype and case: the loss, |dL/da|^2, |dL/dp|^2, sum(dL/d[a; p] * c), dL/da[0, 0], dL/dp[3, 5].
"""
import sys
import torch
from nt_xent_hard_select import NT_Xent

N, D = 64, 16
torch.set_num_threads(1)

def inputs(dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(N, D, generator=g, dtype=torch.float64)
    p = a + 0.7 * torch.randn(N, D, generator=g, dtype=torch.float64)
    return a.to(dtype), p.to(dtype)

def checksum(dtype):
    return torch.randn(2 * N, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)

CASES = {
    "weince_default": dict(policy="tlambda_select"),
    "weince_margin0_rho5_aic2": dict(policy="tlambda_select", select_aic_margin=0.0, select_kappa_rho=5.0, select_kappa_aic=2.0),
    "weince_repro_default": dict(policy="tlambda_select", auto_weib_beta=True, use_weib_topm=True, weib_lambda=0.5,
                                 weib_top_m=50, use_pl_topm=True, pl_lambda=0.5, pl_top_m=50),
}
for dtype in (torch.float64, torch.float32):
    for name, kw in CASES.items():
        a, p = (x.requires_grad_(True) for x in inputs(dtype))
        loss_fn = NT_Xent(batch_size=N, temperature=0.5, **kw)
        loss = loss_fn(a, p)
        ga, gp = torch.autograd.grad(loss, (a, p))
        g = torch.cat([ga, gp])
        vals = [loss.item(), ga.pow(2).sum().item(), gp.pow(2).sum().item(), (g * checksum(dtype)).sum().item(),
                ga[0, 0].item(), gp[3, 5].item()]
        print(str(dtype).split(".")[1], name, repr(tuple(vals)), "beta_ema", float(loss_fn.beta_ema),
              "gate_mean", loss_fn.last_gate_mean, flush=True)
