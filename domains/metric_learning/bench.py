"""``contrasuite bench metric_learning``: our training step against pytorch-metric-learning's own loop (``--against peer``).

Both sides train the same network on the same batches in fp32, in one process, on the same threads:

* ours: the task's ``train_step`` inside the engine's ``Step`` (:class:`StepRunner`), on
  ``configs/metric_learning/<--config>.yaml`` (default ``emoji_multi_similarity``: the reduced emoji
  protocol, blocks 5-15 of EfficientNet-Lite0 + a 128-d head on the cached frozen stem, m-per-class
  batches of 64, our Multi-Similarity loss with its miner, AdamW);
* peer: the hand loop of pytorch-metric-learning's examples, ``optimizer.zero_grad(); emb = model(x);
  pairs = miners.MultiSimilarityMiner(epsilon)(emb, labels); loss = losses.MultiSimilarityLoss(alpha, beta,
  base)(emb, labels, pairs); loss.backward(); optimizer.step()``, on a copy of the same network made
  before either side steps, with an AdamW of the same parameter groups (learning rates, weight decay).

The first step of each side is on the same batch from the same weights: its two losses are the equal-work
check (``loss_check``). Then ``--repeats`` rounds, each timing ``--steps`` steps of one side and then of the
other (the order alternates between rounds, both sides cycle through the same ``--batches`` batches of
epoch 0), so both share whatever load the machine has. The ratio of a round is peer time / our time (above 1:
ours is faster); the headline is the median over rounds, with the smallest and largest. ``--clock cpu``
(default) times this process's CPU time, which another job on the machine disturbs far less than the wall
clock; both clocks are kept in the record.

Our AdamW runs on PyTorch's fused kernel, the pipeline's default (``core/task/optim.py``); the peer's on PyTorch's
CPU default, the per-tensor loop, as its examples run it. Our network's convolution weights are channels-last on
the CPU (``run.memory_format: auto``, ``pipelines/memory_format.py``); the peer's copy is laid out as a network is
built, and both take the task's batches of stem features NCHW, as a PML user's loader hands them (before
2026-12-06 the cache handed them channels-last, and the peer's convolutions followed its input into channels-last).
On channels-last tensors our 5x5 depthwise convolutions sum their weight gradients window by window
(``domains/depthwise_conv.py``); the record says whether they did (``ours_depthwise_grad``, from our step's autograd
graph). Lever (``--compile``; bench-only, not what the pipeline runs): our network under ``torch.compile`` (CPU
inductor; compiled during our first step, which is then the warm-up). A record with levers names them and is
rendered as its own section.

The record (JSON, ``--output``) is what ``--report`` renders into its section of
``docs/results/bench_pipelines.md``; the page is never typed by hand. ``--profile`` adds both sides' operators
(``torch.profiler`` over ``--steps`` more steps per side, the sides in turn) to the record; the section's "where
the time goes" paragraph shows them beside what they are. ``--to-checkpoint`` then trains the config as a user does
(``contrasuite train``, in this process on the same threads, to the end of its schedule, a fresh run each time) and
keeps the training time to the checkpoint the run selects, alternating ``--repeats`` times with the peer's hand loop
run over the epoch's batches to the same step, with no validation and no checkpoint
(``pipelines/bench/against_peer.py``, ``to_checkpoint_rounds``).

    contrasuite bench metric_learning --against peer --threads 1 --profile --to-checkpoint
    contrasuite bench metric_learning --report
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from contrasuite.domains.depthwise_conv import sums_windows
from contrasuite.pipelines.api import (
    HAND_LOOP_EPOCH_END, RECORDS, ROOT, alternate, check_text, comparison_section, cpu_task, host_allocator_fields,
    optimizer_kernel, our_step, ours_text, outcome, peer_flags, peer_main, peer_record, peer_version,
    plain_loop_step, profile_note, PeerRun, profile_sides, pull_levers, retaining_sides, to_checkpoint_rounds,
    weight_layout, where_words,
)

SECTION = "metric_learning"
RECORD = RECORDS / "metric_learning_peer.json"
LEVERS = {"compile": "our network under torch.compile"}
"""The bench-only lever (``--compile``; module docstring)."""
WHERE = (
    "both steps run the same network (blocks 5-15 of EfficientNet-Lite0 and the head: the convolutions' "
    "`mkldnn_convolution` and `convolution_backward`, batch norm, ReLU6 as `clamp` and `hardtanh_backward`, the "
    "depthwise convolutions' padding with its `copy_` and `fill_`), nearly all of either step, and {optimizer}; "
    "the two Multi-Similarity "
    "losses and miners are small operators on 64 embeddings. {rows} Only ours runs the engine's checks (`pipelines/step.py`): one "
    "`_foreach_norm` over the gradients (their global norm, logged and checked finite) and one over the updated "
    "weights (checked finite), a `linalg_vector_norm` per tensor on the CPU, each the one read of its tensors; no "
    "pass multiplies the gradients when nothing clips.")
"""What the operators of either step are (the profile's table gives their times), ``{optimizer}`` filled by
:func:`where_words`."""
LOOP_CLOSING = (" So at the same network and precision the ratio stays near 1: 1.3x would need ours to leave out work "
                "the peer's step does. The levers section measures what fusing the optimizer and compiling the network "
                "give.")
"""The close of records made before the fused default."""


def peer_loop(task: Any) -> tuple[Callable[[tuple[torch.Tensor, torch.Tensor]], float], str]:
    """pytorch-metric-learning's loop on a copy of the task's network (module docstring) and its description."""
    from pytorch_metric_learning import losses, miners

    terms = [dict(t) for t in task.cfg.objective.terms]
    if len(terms) != 1 or terms[0]["name"] not in ("multi_similarity", "pml_multi_similarity"):
        raise SystemExit(f"--against peer compares the Multi-Similarity loss; this config's terms are {terms}")
    term = terms[0]
    kw = {k: term[k] for k in ("alpha", "beta", "base") if k in term}
    loss_fn, miner = losses.MultiSimilarityLoss(**kw), miners.MultiSimilarityMiner(epsilon=term.get("epsilon", 0.1))
    # before any step: the same weights as ours, in the layout a PML user's network has (ours may be channels-last)
    model = copy.deepcopy(task.train_model).to(memory_format=torch.contiguous_format)
    twin = dict(zip(map(id, task.train_model.parameters()), model.parameters()))
    groups = []
    for group in task.optimizers()["model"].param_groups:
        params = [twin[id(p)] for p in group["params"] if id(p) in twin]  # the objective's own (none here) are not the net's
        if params:
            groups.append({"params": params, "lr": group["lr"], "weight_decay": group["weight_decay"]})
    optimizer = torch.optim.AdamW(groups)

    def loss_of(batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        data, labels = batch
        embeddings = model(data)
        return loss_fn(embeddings, labels, miner(embeddings, labels))

    return plain_loop_step(model, optimizer, loss_of, zero_grad_first=True), (f"pytorch-metric-learning {peer_version('pytorch_metric_learning')}: MultiSimilarityLoss({kw}) + "
                  f"MultiSimilarityMiner(epsilon={term.get('epsilon', 0.1)}), hand loop, AdamW")


def run(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as run_dir:
        config = ROOT / "configs" / "metric_learning" / f"{args.config}.yaml"
        task, loaded = cpu_task(config, args.override, args.data_root, Path(run_dir))
        retaining = retaining_sides(loaded)
        batches = list(islice(task.batches(0), args.batches))
        ours = our_step(task)
        peer_step, peer_desc = peer_loop(task)
        levers = pull_levers(task, compile=args.compile)
        torch.manual_seed(1)
        first_ours = ours(batches[0])  # the first step of each: same weights, same batch (and a warm-up)
        torch.manual_seed(1)
        first_peer = peer_step(batches[0])
        sides = {"ours": ours, "peer": peer_step}
        rounds = alternate(sides, batches, args.repeats, args.steps, retaining=retaining)
        profiles = profile_sides(sides, batches, args.steps, retaining=retaining) if args.profile else None
        epoch = list(task.batches(0))  # the peer's hand loop over the epoch's batches, nothing at an epoch's end
        trained = {"to_checkpoint": to_checkpoint_rounds(config, args.override, args.data_root,
                                                         PeerRun(peer_step, epoch, len(epoch)), args.repeats,
                                                         Path(run_dir), retaining=retaining),
                   "peer_epoch_end_what": HAND_LOOP_EPOCH_END} if args.to_checkpoint else {}
    x, y = batches[0]
    window_sums = sums_windows(task.train_model(x))
    kernel = optimizer_kernel(task.optimizers()["model"])
    layout = weight_layout([task.train_model])
    detail = f", AdamW ({kernel} kernel)" + (", channels-last weights (run.memory_format)" if layout == "channels_last" else "")
    own = {"ours": ours_text(f"metric_learning/{args.config}", levers, detail=detail),
           "ours_optimizer": kernel, "ours_layout": layout,
           "ours_depthwise_grad": "window_sums" if window_sums else "pytorch", **host_allocator_fields(retaining),
           "peer": peer_desc,
           "config": args.config, "overrides": list(args.override), "batch": int(x.shape[0]), "input": list(x.shape[1:]),
           "classes_per_batch": int(y.unique().numel()), "distinct_batches": len(batches),
           **({"profile": profiles} if profiles else {}), **trained}
    return peer_record(SECTION, args, argv, LEVERS, levers, own, outcome(first_ours, first_peer, rounds, args.clock))


def render(record: dict[str, Any]) -> str:
    """The page section of one record (markdown)."""
    same_work = (f"the same network (a copy before either steps), batches of {record['batch']} cached stem features "
                 f"{record['input']} ({record['classes_per_batch']} classes, real emoji data, config `{record['config']}`), "
                 f"{record['distinct_batches']} distinct batches cycled by both; first-batch loss "
                 f"{check_text(record['loss_check'])}")
    where = where_words(record, WHERE, "AdamW", "`lerp_`, `sqrt`, `addcdiv_`, `addcmul_`", LOOP_CLOSING)
    note = None if record.get("levers") and "profile" not in record else profile_note(record, where)
    return comparison_section(record, "metric_learning: our step vs pytorch-metric-learning's loop", same_work, note=note)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="contrasuite bench metric_learning", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="emoji_multi_similarity", help="a configs/metric_learning/ name")
    peer_flags(parser, RECORD, LEVERS, batches=8, steps=10, peer="pytorch-metric-learning's loop", profile=True,
               to_checkpoint=True)
    return peer_main(parser.parse_args(argv), argv, run, render)


if __name__ == "__main__":
    raise SystemExit(main())
