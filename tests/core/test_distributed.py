"""Every registered objective, split over 2 and 4 gloo processes, equals the single-process result.

Gradient convention checked here (see ``contrasuite.core.distributed``): the mean over ranks of
the returned loss equals the single-process loss on the concatenated batch; the gradient at each
rank's local inputs equals ``W x`` the single-process gradient of that slice (DDP then divides
parameter gradients by ``W``); the learnable parameters' gradients averaged over ranks (what DDP
does) equal the single-process gradients.

One process group per world size runs every objective in ``OBJECTIVES`` (read at test time, so
objectives added later are covered) on three input layouts. A layout the objective rejects in a
single process (e.g. no labels) is inapplicable for it; every objective must pass at least one
layout, unless it is listed in ``NOT_COMPARABLE`` with the reason.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Callable

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.distributed import all_gather_with_grad, distributed_objective, world as dist_world
from contrasuite.core.negatives.queue import NegativeQueue
from contrasuite.core.objectives import OBJECTIVES, ContrastiveObjective, Distributed, weighted_infonce

pytestmark = pytest.mark.distributed

D = 16
NOT_COMPARABLE: dict[str, str] = {}
"""Registered objectives whose semantics make the split-vs-whole comparison impossible: name -> reason."""


class RingSigmoid(ContrastiveObjective):
    """A SigLIP-style sum of pair terms with learnable scale and bias: exercises the ring path."""

    distributed = Distributed.PAIRWISE_RING

    def __init__(self) -> None:
        super().__init__()
        self.log_scale = nn.Parameter(torch.tensor(math.log(10.0)))
        self.bias = nn.Parameter(torch.tensor(-2.0))

    def per_anchor(self, anchors, candidates, pairs, neg_weight):
        logits = self.log_scale.exp() * F.normalize(anchors, dim=1) @ F.normalize(candidates, dim=1).T + self.bias
        sign = pairs.pos.to(logits.dtype) * 2 - 1
        terms = -F.logsigmoid(sign * logits)
        return torch.where(pairs.valid, terms, torch.zeros_like(terms)).sum(dim=1)


class GlobalQuantile(ContrastiveObjective):
    """InfoNCE whose per-anchor temperature depends on a batch quantile (like WEINCE's rho_0 gate)."""

    distributed = Distributed.GLOBAL_STATISTICS

    def per_anchor(self, anchors, candidates, pairs, neg_weight):
        sim = F.normalize(anchors, dim=1) @ F.normalize(candidates, dim=1).T
        with torch.no_grad():
            hardest = torch.where(pairs.neg, sim, torch.full_like(sim, -1.0)).amax(dim=1)
            rho = (1 - hardest).clamp_min(1e-6)
            rho0 = torch.quantile(rho, 0.2)
            gate = torch.sigmoid(10 * (rho0.log() - rho.log()))
        return weighted_infonce(sim / (0.2 * (1 + gate[:, None])), pairs, neg_weight)


class QuantileDeclaredAsGather(GlobalQuantile):
    """Control: the same objective wrongly declared as local-rows-only must NOT match."""

    distributed = Distributed.GATHER_CANDIDATES


TILE = 3
"""Tile size of the tiled variants (``tiled:<name>``): blocks smaller than every rank's slice."""


def objectives_under_test() -> dict[str, Callable[[], ContrastiveObjective]]:
    """Every registered objective, the local test objectives, and every registered objective that takes
    ``tile_size`` once more, tiled: local rows against gathered columns, each ring block, or the
    global batch, in tiles (single-process tiled equals dense: ``test_tiled.py``)."""
    found: dict[str, Callable[[], ContrastiveObjective]] = {f"registry:{name}": cls for name, cls in OBJECTIVES.items()}
    found.update({"local:ring_sigmoid": RingSigmoid, "local:global_quantile": GlobalQuantile})
    for name, cls in OBJECTIVES.items():
        if "tile_size" in inspect.signature(cls).parameters:
            found[f"tiled:{name}"] = functools.partial(cls, tile_size=TILE)
    return found


def sizes_for(layout: str, world: int) -> tuple[list[int], list[int]]:
    """Per-rank anchor and candidate counts (uneven where the layout allows, to test padding)."""
    if layout == "paired":
        return [8] * world, [8] * world
    if layout == "paired_extra":
        rows = [8 - (r % 2) for r in range(world)]
        return rows, [n + 3 for n in rows]
    rows = [8 + (r % 2) for r in range(world)]
    return rows, rows


def global_inputs(layout: str, world: int) -> dict:
    """The concatenated batch, identical on every rank (fixed seed)."""
    gen = torch.Generator().manual_seed(1234 + world)
    rows, cols = sizes_for(layout, world)
    anchors = torch.randn(sum(rows), D, generator=gen, dtype=torch.float64)
    out = {"rows": rows, "cols": cols, "anchors": anchors, "candidates": None, "labels": None, "pos_mask": None}
    if layout == "labels":
        out["labels"] = torch.randint(0, 5, (sum(rows),), generator=gen)
        return out
    candidates = torch.randn(sum(cols), D, generator=gen, dtype=torch.float64) * 0.5
    pos = torch.zeros(sum(rows), sum(cols), dtype=torch.bool)
    r0 = c0 = 0
    for n, m in zip(rows, cols):
        pos[r0 : r0 + n, c0 : c0 + n] = torch.eye(n, dtype=torch.bool)
        candidates[c0 : c0 + n] += anchors[r0 : r0 + n]  # positives carry signal
        r0, c0 = r0 + n, c0 + m
    out["candidates"] = candidates
    if layout == "paired_extra":
        out["pos_mask"] = pos  # the concatenated default diagonal would be wrong here
    return out


def rel_err(got: Tensor, want: Tensor) -> float:
    return float((got - want).abs().max() / (want.abs().max() + 1e-12))


class ForeignCentred(nn.Module):
    """Another library's loss: no ``distributed`` declaration, and a statistic of the whole batch."""

    def forward(self, anchors: Tensor, candidates: Tensor | None = None, *, labels: Tensor | None = None, **_: object) -> Tensor:
        centred = anchors - anchors.mean(0)
        return (centred.pow(2).sum(1) * (1 + labels.double())).mean()


def compare(factory, layout: str, rank: int, world: int, with_prior: bool = False) -> dict:
    """``with_prior``: a similarity prior ``[N, M]`` (Soft-InfoNCE's), local rows against all columns."""
    g = global_inputs(layout, world)
    rows, cols = g["rows"], g["cols"]
    kw = {} if g["labels"] is None else {"labels": g["labels"]}
    if g["pos_mask"] is not None:
        kw["pos_mask"] = g["pos_mask"]
    r0, c0 = sum(rows[:rank]), sum(cols[:rank])
    local_kw = {} if g["labels"] is None else {"labels": g["labels"][r0 : r0 + rows[rank]]}
    if with_prior:
        kw["prior"] = torch.rand(sum(rows), sum(cols), generator=torch.Generator().manual_seed(7), dtype=torch.float64)
        local_kw["prior"] = kw["prior"][r0 : r0 + rows[rank]]
    torch.manual_seed(0)
    ref_obj = factory().double()
    A = g["anchors"].clone().requires_grad_()
    C = None if g["candidates"] is None else g["candidates"].clone().requires_grad_()
    try:
        ref = ref_obj(A, C, **kw)
        ref.backward()
    except (ValueError, TypeError, NotImplementedError) as err:
        return {"status": "inapplicable", "reason": f"{type(err).__name__}: {err}"}

    torch.manual_seed(0)
    obj = factory().double()
    a = g["anchors"][r0 : r0 + rows[rank]].clone().requires_grad_()
    c = None if C is None else g["candidates"][c0 : c0 + cols[rank]].clone().requires_grad_()
    try:
        loss = distributed_objective(obj, a, c, **local_kw)
        loss.backward()
    except Exception:  # noqa: BLE001 - reported as a failure with its traceback
        return {"status": "error", "reason": traceback.format_exc(limit=4)}
    errors = {}
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    errors["loss"] = rel_err(mean_loss / world, ref.detach())
    errors["grad_anchors"] = rel_err(a.grad, world * A.grad[r0 : r0 + rows[rank]])
    if c is not None:
        errors["grad_candidates"] = rel_err(c.grad, world * C.grad[c0 : c0 + cols[rank]])
    for (name, p), (_, p_ref) in zip(obj.named_parameters(), ref_obj.named_parameters()):
        grad = torch.zeros_like(p) if p.grad is None else p.grad.clone()
        dist.all_reduce(grad)
        want = torch.zeros_like(p_ref) if p_ref.grad is None else p_ref.grad
        errors[f"grad_param:{name}"] = rel_err(grad / world, want)
    ok = all(e < 1e-6 for e in errors.values())
    behaviour = getattr(obj, "distributed", "undeclared")
    return {"status": "ok" if ok else "mismatch", "errors": errors, "behaviour": str(behaviour)}


LAYOUTS = ("paired", "paired_extra", "labels")


def queue_enqueues_gathered_keys(rank: int, world: int) -> dict:
    """Every rank's queue holds all ranks' keys in rank order, wrapping round K = 7."""
    queue = NegativeQueue(size=7, dim=2)
    for step in range(2):
        keys = torch.full((3, 2), float(100 * step + rank))
        queue.enqueue(keys)
    expected = [float(100 * step + r) for step in range(2) for r in range(world) for _ in range(3)][-7:]
    got = queue.negatives()[:, 0].tolist()
    return {"status": "ok" if got == expected and dist_world()[1] == world else "mismatch", "errors": {"got": got}}


def gather_backward_sums_over_ranks(rank: int, world: int) -> dict:
    """d/dx_r of sum_q (w_q . gathered) is sum_q w_q restricted to rank r's rows (uneven sizes)."""
    sizes = [2 + r for r in range(world)]
    x = torch.full((sizes[rank], 3), float(rank), dtype=torch.float64, requires_grad=True)
    gathered = all_gather_with_grad(x)
    weights = torch.arange(gathered.numel(), dtype=torch.float64).reshape(gathered.shape) * (rank + 1)
    (gathered * weights).sum().backward()
    start = sum(sizes[:rank])
    base = torch.arange(gathered.numel(), dtype=torch.float64).reshape(gathered.shape)[start : start + sizes[rank]]
    want = base * sum(q + 1 for q in range(world))
    values_ok = gathered[:, 0].tolist() == [float(r) for r in range(world) for _ in range(sizes[r])]
    ok = values_ok and torch.equal(x.grad, want)
    return {"status": "ok" if ok else "mismatch", "errors": {"grad": x.grad.tolist()}}


def run_group(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world, timeout=timedelta(seconds=60)
    )
    try:
        results = {}
        for name, cls in objectives_under_test().items():
            for layout in LAYOUTS:
                results[f"{name}/{layout}"] = compare(cls, layout, rank, world)
        results["control:quantile_as_gather/labels"] = compare(QuantileDeclaredAsGather, "labels", rank, world)
        results["prior:soft_infonce/paired_extra"] = compare(OBJECTIVES["soft_infonce"], "paired_extra", rank, world, True)
        results["foreign:centred/labels"] = compare(ForeignCentred, "labels", rank, world)
        results["queue:gathered_enqueue/keys"] = queue_enqueues_gathered_keys(rank, world)
        results["gather:uneven_sizes/grad"] = gather_backward_sums_over_ranks(rank, world)
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))


@pytest.mark.parametrize("world", [2, 4])
def test_split_batch_equals_single_process(world, tmp_path):
    mp.spawn(run_group, args=(world, str(tmp_path / "init"), str(tmp_path)), nprocs=world, join=True)
    per_rank = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    failures, passed = [], {}
    for key in per_rank[0]:
        name = key.rsplit("/", 1)[0]
        statuses = [res[key] for res in per_rank]
        if key.startswith("control:"):
            assert all(s["status"] == "mismatch" for s in statuses), f"{key}: a wrongly declared objective matched"
            continue
        if key.startswith(("queue:", "gather:")):
            assert all(s["status"] == "ok" for s in statuses), f"{key}: {statuses}"
            continue
        if all(s["status"] == "inapplicable" for s in statuses):
            continue
        bad = [(r, s) for r, s in enumerate(statuses) if s["status"] != "ok"]
        if bad:
            failures.append(f"{key}: " + "; ".join(f"rank {r}: {s}" for r, s in bad))
        else:
            passed.setdefault(name, []).append(key.rsplit("/", 1)[1])
    assert not failures, "\n".join(failures)
    for name in objectives_under_test():
        short = name.split(":", 1)[1]
        if short in NOT_COMPARABLE:
            continue
        reasons = {k: per_rank[0][k].get("reason") for k in per_rank[0] if k.startswith(name + "/")}
        assert name in passed, f"{name}: no input layout applies ({reasons}); list it in NOT_COMPARABLE with a reason"
    assert {"local:ring_sigmoid", "local:global_quantile", "registry:infonce", "tiled:infonce", "tiled:siglip",
            "prior:soft_infonce", "foreign:centred"} <= set(passed)


def test_not_comparable_entries_are_registered():
    assert set(NOT_COMPARABLE) <= set(OBJECTIVES), "NOT_COMPARABLE names an objective that is not registered"
    assert all(reason.strip() for reason in NOT_COMPARABLE.values())

