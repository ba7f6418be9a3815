"""``contrasuite bench image_ssl``: our SimCLR training step against lightly's (``--against peer``).

Both sides train the same CIFAR ResNet-18 (3x3 stem, no max-pool) with SimCLR's projection head on the same
two-view batches, in fp32, in one process, on the same threads:

* ours: the task's ``train_step`` inside the engine's ``Step`` (:class:`StepRunner`) on
  ``configs/image_ssl/<--config>.yaml`` (default ``infonce``: batch 256 at 32 px, projection 512-512-128,
  InfoNCE at temperature 0.5 on the 2N two-view batch, SGD with momentum, weight decay and the warm-up/cosine
  schedule) with ``run.precision=fp32``;
* peer: lightly's ``NTXentLoss(temperature)`` and its ``ProjectionHead`` in a plain loop, ``z0, z1 =
  model(cat(x0, x1)).chunk(2); loss = criterion(z0, z1); loss.backward(); optimizer.step()``, on a copy of the
  same encoder and head weights made before either side steps, with an SGD of the same settings and the same
  schedule. The head is lightly's ``ProjectionHead`` built with SimCLR v1's blocks, ``Linear(512, 512) -> BN ->
  ReLU -> Linear(512, 128)`` (ours); lightly's ``SimCLRProjectionHead`` adds a BatchNorm after the last layer,
  which would be other work and another loss. Both views go through the network as one batch of 2N, as ours
  does (lightly's example calls the model once per view, which gives BatchNorm other statistics and so another
  loss).

The peer's views are made by our task's augmentation of the same batch (same seed), inside its step as in
ours, so both steps do the same data work. The first step of each side, from the same weights on the same
views, gives the equal-work check (``loss_check``). Then ``--repeats`` rounds of ``--steps`` steps per side,
the order alternating between rounds; a round's ratio is peer time / our time (above 1: ours is faster),
the headline the median over rounds with the smallest and largest. ``--clock cpu`` (default) is this process's CPU
time; both clocks are kept in the record (``--output``), which ``--report`` renders into its section of
``docs/results/bench_pipelines.md``. ``--profile`` adds both sides' operators (``torch.profiler`` over ``--steps``
more steps per side, the sides in turn) and our step's compute bound (``compute_bound``: its FLOPs over the fp32
matrix-product peak) to the record; the section's "where the time goes" paragraph shows them beside what they are.

Our SGD runs on PyTorch's fused kernel and our convolution weights are channels-last (``run.memory_format: auto``
on the CPU, ``pipelines/memory_format.py``), the pipeline's defaults; the peer's SGD runs PyTorch's CPU default,
the per-tensor loop, on a network laid out as built (NCHW), as lightly's examples run it. ``--override
run.memory_format=contiguous`` measures ours as built. The lever (bench-only, not what the pipeline runs):
``--compile`` (our network under ``torch.compile``, CPU inductor, compiled during our first step). A record with a
lever names it and is rendered as its own section.

lightly is installed with ``pip install --no-deps lightly``: its ``hydra-core`` requirement would downgrade
omegaconf, the project's config library, and the loss and heads import neither hydra nor lightning.

``--to-checkpoint`` adds the time to the checkpoint ours selects: ``configs/image_ssl/reduced_infonce.yaml`` (the
reduced CPU protocol's SimCLR, small encoder) trained as a user does, against lightly's loop on a copy of that
config's network for as many steps, whole runs alternating (``pipelines/bench/against_peer.py``,
``to_checkpoint_rounds``); ``--override`` applies to both configs.

    contrasuite bench image_ssl --against peer --threads 1 --profile --to-checkpoint
    contrasuite bench image_ssl --report
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from contrasuite.pipelines.api import (
    HAND_LOOP_EPOCH_END, RECORDS, ROOT, PeerRun, alternate, check_text, comparison_section, compute_bound, cpu_task,
    host_allocator_fields, optimizer_kernel, our_step, ours_text, outcome, peer_flags, peer_main, peer_record,
    plain_loop_step, profile_note, profile_sides, pull_levers, retaining_sides, to_checkpoint_rounds, weight_layout,
    where_words,
)

SECTION = "image_ssl"
RECORD = RECORDS / "image_ssl_peer.json"
LEVERS = {"compile": "our network under torch.compile"}
"""The bench-only lever (``--compile``; module docstring)."""
WHERE = (
    "both steps run the same ResNet-18 and projection head on the same views (the convolutions' "
    "`mkldnn_convolution` and `convolution_backward`, batch norm, ReLU as `clamp_min_` and `threshold_backward`, "
    "`copy_`), nearly all of either step, and {optimizer}; the two NT-Xent losses are small operators on 512 "
    "embeddings. {rows} Only ours runs the engine's checks "
    "(`pipelines/step.py`): one `_foreach_norm` over the gradients (their global norm, logged and checked finite) "
    "and one over the updated weights (checked finite), each the one read of its tensors; no pass multiplies the "
    "gradients when nothing clips.")
"""What the operators of either step are (the profile's table gives their times), ``{optimizer}`` and ``{rows}``
filled by :func:`where_words`."""
LOOP_CLOSING = (" So at the same network and precision the ratio stays near 1: 1.3x would need ours to leave out work "
                "the peer's step does. The levers section measures what channels-last weights, fused SGD and compiling "
                "the network give.")
"""The close of records made before the fused default."""


class LightlySimCLR(nn.Module):
    """Backbone + lightly's projection head: ``forward(x) -> z`` (lightly's SimCLR model layout)."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.projection_head = backbone, head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection_head(self.backbone(x).flatten(start_dim=1))


def peer_loop(task: Any) -> tuple[Callable[[Any], float], str]:
    """lightly's loop on a copy of the task's network (module docstring) and its description."""
    import lightly
    from lightly.loss import NTXentLoss
    from lightly.models.modules.heads import ProjectionHead

    cfg = task.cfg
    terms = [dict(t) for t in cfg.objective.terms]
    if cfg.objective.views != "two_view" or len(terms) != 1 or terms[0]["name"] != "infonce" or task.key_model is not None:
        raise SystemExit(f"--against peer compares SimCLR's two-view InfoNCE; this config's terms are {terms}")
    temperature = terms[0].get("temperature", 0.5)
    ours_head = task.model.head.net
    first, bn, last = ours_head[0], ours_head[1], ours_head[3]
    head = ProjectionHead([(first.in_features, first.out_features, nn.BatchNorm1d(bn.num_features), nn.ReLU()),
                           (last.in_features, last.out_features, None, None, last.bias is not None)])
    head.load_state_dict(dict(zip(head.state_dict(), ours_head.state_dict().values())))  # same layers, same order
    # the same weights as ours, in the layout a lightly user's network has (ours may be channels-last)
    encoder = copy.deepcopy(task.model.encoder).to(memory_format=torch.contiguous_format)
    model = LightlySimCLR(encoder, head).to(task.ctx.device)
    criterion = NTXentLoss(temperature=temperature)
    o = cfg.optim
    if o.name != "sgd":
        raise SystemExit(f"--against peer mirrors an SGD config; this one has config.optim.name={o.name!r}")
    optimizer = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, task.schedulers()["model"].lr_lambdas[0])

    def loss_of(batch: Any) -> torch.Tensor:
        x0, x1 = task._views(batch)  # the same augmentation of the same images as ours, in the step as ours
        return criterion(*model(torch.cat([x0, x1])).chunk(2))

    return plain_loop_step(model, optimizer, loss_of, scheduler), (f"lightly {lightly.__version__}: NTXentLoss(temperature={temperature:g}) + ProjectionHead"
                  f"({first.in_features}-{first.out_features}-{last.out_features}, BN, ReLU), plain loop, SGD")


TO_CHECKPOINT = "reduced_infonce"
"""``--to-checkpoint``: the config trained to its checkpoint, SimCLR in the reduced CPU protocol of ``contrasuite
compare image_ssl`` (its small encoder: the bench's ResNet-18 at batch 256 trains for hours on a CPU)."""


def to_checkpoint(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """Ours trained as a user does (:data:`TO_CHECKPOINT` with ``--override``) against lightly's loop on a copy of
    that config's network for as many steps, over our loader's epoch 0, nothing at its epoch ends
    (:func:`~contrasuite.pipelines.bench.against_peer.to_checkpoint_rounds`)."""
    config = ROOT / "configs" / "image_ssl" / f"{TO_CHECKPOINT}.yaml"
    task, loaded = cpu_task(config, args.override, args.data_root, folder / "setup")
    peer_step, _ = peer_loop(task)
    epoch = list(task.batches(0))
    rounds = to_checkpoint_rounds(config, args.override, args.data_root, PeerRun(peer_step, epoch, len(epoch)),
                                  args.repeats, folder, retaining=retaining_sides(loaded))
    return {"to_checkpoint": rounds, "peer_epoch_end_what": HAND_LOOP_EPOCH_END}


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    overrides = ["run.precision=fp32", f"config.batch_size={args.batch}", f"config.data.train_subset={args.subset}",
                 *args.override]
    with tempfile.TemporaryDirectory() as run_dir:
        config = ROOT / "configs" / "image_ssl" / f"{args.config}.yaml"
        task, loaded = cpu_task(config, overrides, args.data_root, Path(run_dir))
        retaining = retaining_sides(loaded)
        batches = [b for _, b in zip(range(args.batches), task.batches(0))]
        peer_step, peer_desc = peer_loop(task)  # before our first step: the same weights
        ours = our_step(task)
        levers = pull_levers(task, compile=args.compile)
        first_ours, first_peer = ours(batches[0]), peer_step(batches[0])  # also each side's warm-up
        sides = {"ours": ours, "peer": peer_step}
        rounds = alternate(sides, batches, args.repeats, args.steps, retaining=retaining)
        profiles = profile_sides(sides, batches, args.steps, retaining=retaining) if args.profile else None
        compute = compute_bound(ours, batches[0]) if args.profile else None
        as_user = to_checkpoint(args, Path(run_dir)) if args.to_checkpoint else {}
    m = task.cfg.model
    kernel = optimizer_kernel(task.optimizers()["model"])
    layout = weight_layout([task.model])
    detail = f", SGD ({kernel} kernel)" + (", channels-last weights (run.memory_format)" if layout == "channels_last" else "")
    own = {"ours": ours_text(f"image_ssl/{args.config} (run.precision=fp32)", levers, detail),
           "ours_optimizer": kernel, "ours_layout": layout, **host_allocator_fields(retaining), "peer": peer_desc,
           "config": args.config, "overrides": overrides, "encoder": m.encoder, "head": [m.proj_hidden, m.proj_dim],
           "batch": int(task.cfg.batch_size), "image_size": int(task.cfg.data.image_size),
           "data": f"{task.data_source}, {len(task.train_images)}-image training subset", "distinct_batches": len(batches),
           **({"profile": profiles, "compute": compute} if profiles else {}), **as_user}
    return peer_record(SECTION, args, argv, LEVERS, levers, own, outcome(first_ours, first_peer, rounds, args.clock))


def render(record: dict[str, Any]) -> str:
    """The page section of one record (markdown)."""
    same_work = (
        f"{record['encoder']} with a {record['head'][0]}-{record['head'][1]} projection head (a copy of "
        f"our weights before either steps), batch {record['batch']} (two views: {2 * record['batch']} images of "
        f"{record['image_size']} px per step), {record['data']}, {record['distinct_batches']} distinct batches, "
        f"our augmentation inside both steps; first-step loss {check_text(record['loss_check'])}")
    where = where_words(record, WHERE, "SGD", "`add_`, `mul_`", LOOP_CLOSING)
    note = None if record.get("levers") and "profile" not in record else profile_note(record, where)
    return comparison_section(record, "image_ssl: our SimCLR step vs lightly", same_work, unit="s", digits=2,
                              steps="step(s)", note=note)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="contrasuite bench image_ssl", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="infonce", help="a configs/image_ssl/ name (run.precision=fp32 is set)")
    parser.add_argument("--batch", type=int, default=256, help="config.batch_size")
    parser.add_argument("--subset", type=int, default=2560, help="config.data.train_subset (images loaded)")
    peer_flags(parser, RECORD, LEVERS, batches=4, steps=1, peer="lightly's SimCLR loop", profile=True,
               to_checkpoint=True)
    return peer_main(parser.parse_args(argv), argv, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
