"""``contrasuite bench code_search``: throughput and peak memory of a bi-encoder training step,
one full contrastive batch against the same batch through GradCache.

Both modes do the same update: embed ``--batch`` (query, code) pairs with the encoder, InfoNCE
(cosine / 0.05, in-batch negatives) on the whole batch, AdamW step, under ``--precision`` autocast.
``plain`` backpropagates through all ``--batch`` pairs at once; ``gradcache`` embeds chunks of
``--chunk`` pairs without a graph, takes the loss gradient on the cached embeddings and re-embeds each
chunk with a graph (:func:`contrasuite.core.gradcache.cached_backward`), so activation memory is that
of one chunk. Each mode runs in a fresh subprocess; ``--warmup`` untimed steps, then the fastest of ``--steps``. Peak memory: on CUDA,
``torch.cuda.max_memory_allocated``; on the CPU, the process's peak resident set size minus its size
just before the first step (``resource.getrusage``), which includes allocator caching.
The texts are real functions (and their docstring summaries) of the standard library's ``email``
package, cycled to fill the batch.

The side-by-side embedding rows time inference on the same code texts: ``embed`` is this package's
evaluation path (:meth:`BiEncoder.embed`: length-sorted batches of ``--embed-batch``, truncation at
``--max-code-length``), ``sentence-transformers`` is plain ``SentenceTransformer.encode`` of the same
model folder with the same batch size and ``max_seq_length``; the second row also gives the largest
absolute difference between the two embeddings. ``--corpus cosqa`` embeds CoSQA's functions (from
the data root), ``stdlib`` (default) ``--texts`` functions of ``email``.

``--against peer`` compares our training step with sentence-transformers' in one process instead (no
subprocesses; :func:`against_peer`): the task of ``--config`` (default ``code_search/reduced_infonce`` on the
``smoke`` mined set: MiniLM bi-encoder, batch 32, queries at 32 tokens and code at 64, InfoNCE at temperature
0.05, AdamW with its warm-up, fp32) run by :class:`StepRunner`, against ``SentenceTransformer`` of the same
model folder trained by ``MultipleNegativesRankingLoss(scale=1/temperature)`` in a plain loop (tokenize with
the same lengths, loss, backward, AdamW and the same warm-up schedule); and our GradCache step
(``config.grad_cache_chunk=--chunk``, default 8) against ``CachedMultipleNegativesRankingLoss`` with
``mini_batch_size=--chunk``. Both sides tokenize their batch inside the step. The equal-work check: both losses
on the first batch with dropout off, before training. Then ``--repeats`` rounds of ``--steps`` steps per side,
the order alternating; the ratio of a round is peer time / our time (process CPU time by default, ``--clock``);
the record goes to ``--output`` and ``--report`` renders it into ``docs/results/bench_pipelines.md``.
Our AdamW runs on PyTorch's fused kernel, the pipeline's default (``core/task/optim.py``); the peer's on PyTorch's
CPU default, the per-tensor loop. Our plain step pads its queries and code in length groups
(``config.encoder.group_cost_tokens``); the record keeps both sides' padded tokens per step. A ``--config`` other
than the default gets its own record and section (``code_search+<config name>``):

    contrasuite bench code_search --against peer --config code_search/infonce --mined reduced --grad-cache-chunk 0 \
        --steps 2 --threads 1 --output docs/results/records/bench_pipelines/code_search_peer_infonce.json

``--profile`` adds both sides' operators (``torch.profiler`` over ``--steps`` more steps per side and step kind,
the sides in turn) and each of our steps' compute bound (``compute_bound``: its FLOPs over the fp32 matrix-product
peak) to the record; the section's "where the time goes" paragraph shows them beside what they are.

``--to-checkpoint`` then trains ``--config`` on ``--mined`` as a user does (``contrasuite train``, its embedding cache
off, each run fresh) and runs the peer's plain loop to the same step as sentence-transformers' ``fit`` runs a
selecting run: over the epoch's batches, then at each epoch's end its ``InformationRetrievalEvaluator`` on the same
validation pairs and ``save()`` of a better model (:func:`_peer_epoch_ends`); the two alternate ``--repeats`` times.
With ``--mined reduced`` that is the shipped ``reduced_infonce`` as shipped:

    contrasuite bench code_search --against peer --threads 1 --profile --mined reduced --to-checkpoint
    contrasuite bench code_search --against peer --report
    contrasuite bench code_search --batch 1024 --chunk 32          # a GPU
    contrasuite bench code_search --batch 64 --chunk 16 --steps 1  # a small CPU check
    contrasuite bench code_search --modes embed sentence-transformers --corpus cosqa --texts 0 --steps 1 --threads 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
from queue import Empty
import resource
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from contrasuite.core.gradcache import cached_backward
from contrasuite.core.objectives import InfoNCE
from contrasuite.core.task.optim import build_optimization
from contrasuite.core.task.precision import autocast_for
from contrasuite.domains.code_search.data import COSQA_FOLDER, load_cosqa
from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig, resolve_model_path
from contrasuite.domains.code_search.mine import iter_functions, summary
from contrasuite.domains.hugging_face import local_models_only
from contrasuite.pipelines.api import (
    RECORDS, alternate, ceiling_text, checkpoint_sentence, checks_text, compute_bound, cpu_task, differences, heading,
    host_allocator_fields, host_memory_lines, machine_lines, optimizer_kernel, our_step, ours_text, outcome,
    peer_flags, peer_main, peer_record, PeerRun, plain_loop_step, profile_note, profile_sides, profile_table,
    retaining_sides, round_cells, to_checkpoint_rounds, where_words,
)

EMBED_MODES = ("embed", "sentence-transformers")


def _texts(n: int) -> tuple[list[str], list[str]]:
    fns = [f for f in iter_functions(Path(sysconfig.get_paths()["stdlib"]) / "email")
           if not isinstance(f, tuple) and f.docstring and f.code]
    fns = [fns[i % len(fns)] for i in range(n)]
    return [summary(f.docstring) for f in fns], [f.code for f in fns]


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def _corpus(args: dict) -> list[str]:
    """The code texts the embedding rows embed: ``--texts`` of them (0: all of CoSQA; 512 of ``email``)."""
    if args["corpus"] == "cosqa":
        code = load_cosqa(Path(args["data_root"]) / COSQA_FOLDER).code
        return code[: args["texts"]] if args["texts"] else code
    return _texts(args["texts"] or 512)[1]


def _sentence_transformer(model: str, device: torch.device) -> Any:
    """``SentenceTransformer`` of the same local model folder as :class:`BiEncoder`, offline."""
    from sentence_transformers import SentenceTransformer

    local_models_only()
    return SentenceTransformer(str(resolve_model_path(model)), device=str(device), local_files_only=True)


def _embed_rows(mode: str, args: dict, cfg: EncoderConfig, device: torch.device) -> tuple[dict, np.ndarray]:
    """One embedding row (fastest of ``--steps`` passes over the corpus) and its embeddings."""
    texts, batch, length = _corpus(args), args["embed_batch"], cfg.max_code_length
    if mode == "embed":
        enc = BiEncoder(cfg).to(device)
        run = lambda items: enc.embed(items, "code", batch, device, length)
    else:
        st = _sentence_transformer(cfg.model, device)
        st.max_seq_length = length
        run = lambda items: st.encode(items, batch_size=batch, convert_to_tensor=True, normalize_embeddings=cfg.normalize,
                                      show_progress_bar=False)
    times = []
    with torch.no_grad(), autocast_for(args["precision"], device):
        if args["warmup"]:
            run(texts[:batch])
        for _ in range(args["steps"]):
            start = time.perf_counter()
            emb = run(texts)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    sec = min(times)
    row = {"mode": mode, "texts": len(texts), "batch": batch, "seconds": sec, "texts_per_s": len(texts) / sec}
    return row, emb.float().cpu().numpy()


def _run(mode: str, args: dict, queue: mp.Queue) -> None:
    torch.manual_seed(0)
    if args["threads"]:
        torch.set_num_threads(args["threads"])
    device = torch.device(args["device"])
    cfg = EncoderConfig(model=args["model"], max_query_length=args["max_query_length"], max_code_length=args["max_code_length"])
    if mode in EMBED_MODES:
        queue.put(_embed_rows(mode, args, cfg, device))
        return
    enc = BiEncoder(cfg).to(device).train()
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-5)
    loss_fn = InfoNCE(temperature=0.05)
    queries, code = _texts(args["batch"])
    q_tok = {k: v.to(device) for k, v in enc.tokenize(queries, cfg.max_query_length).items()}
    c_tok = {k: v.to(device) for k, v in enc.tokenize(code, cfg.max_code_length).items()}
    def embed(sl: slice) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast_for(args["precision"], device):
            return enc(**{k: v[sl] for k, v in q_tok.items()}), enc(**{k: v[sl] for k, v in c_tok.items()})

    def step() -> None:
        if mode == "plain":
            q, c = embed(slice(None))
            loss_fn(q, c).backward()
        else:
            b, k = args["batch"], args["chunk"]
            cached_backward(embed, [slice(s, min(b, s + k)) for s in range(0, b, k)], lambda q, c: loss_fn(q, c))
        opt.step()
        opt.zero_grad(set_to_none=True)

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    base_rss = _rss_mb()
    times = []
    for i in range(args["warmup"] + args["steps"]):
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= args["warmup"]:
            times.append(time.perf_counter() - start)
    if device.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        kind = "cuda max_memory_allocated above start"
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base_rss
        kind = "peak RSS above start"
    sec = min(times)
    queue.put(({"mode": mode, "batch": args["batch"], "chunk": args["chunk"] if mode == "gradcache" else args["batch"],
                "seconds_per_step": sec, "pairs_per_s": args["batch"] / sec, "peak_mb": peak, "memory": kind}, None))


def table_line(r: dict) -> str:
    """One markdown row of a result: an embedding mode (EMBED_HEADER) or a training step (STEP_HEADER)."""
    embedding = r["mode"] in EMBED_MODES
    if "error" in r:
        failed = f"did not run: {r['error']}"
        cells = ["-", "-", failed, "-", "-"] if embedding else [r["batch"], "-", failed, "-"]
    elif embedding:
        diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else "-"
        cells = [f"{r['texts']:,}", r["batch"], f"{r['texts_per_s']:.1f}", f"{r['seconds']:.1f}", diff]
    else:  # a plain step has no chunk
        chunk = r.get("chunk", "-") if r["mode"] == "gradcache" else "-"
        cells = [r["batch"], chunk, f"{r['pairs_per_s']:.1f}", f"{r['peak_mb']:.0f}"]
    return "| " + " | ".join(str(c) for c in (r["mode"], *cells)) + " |"


STEP_HEADER = "| mode | batch | chunk | pairs/s | peak MB |"
EMBED_HEADER = "| embedding | texts | batch | texts/s | seconds | max abs diff |"


# -- --against peer: our training step against sentence-transformers' (module docstring) ------------------

SECTION = "code_search"
RECORD = RECORDS / "code_search_peer.json"
DEFAULT_CONFIG = "code_search/reduced_infonce"
"""The ``--against peer`` config whose record is :data:`RECORD` (section :data:`SECTION`)."""
WHERE = (
    "both steps run the same MiniLM-L6 encoder on the same texts (its linear layers' `addmm` and `mm`, forward and "
    "backward, attention's `bmm` and `_softmax`, dropout's `bernoulli_`, `gelu`, layer norm), nearly all of either "
    "step, and {optimizer}; the tokenizers' Python work is in the rounds' times, not in the tables. Over these few profiled steps the same "
    "kernels' rows differ between the sides by the machine's load (a side's large rows rise or fall together), not "
    "by the code; under GradCache the two implementations also run their chunks' backward passes differently. "
    "Beyond these, ours runs the engine's checks (`pipelines/step.py`): one `_foreach_norm` over the gradients "
    "(their global norm, logged and checked finite) and one over the updated weights (checked finite), each the "
    "one read of its tensors; no pass multiplies the gradients when nothing clips.")
"""What the operators of either step are (the profiles' tables give their times), ``{optimizer}`` filled by
:func:`where_words`."""
LOOP_CLOSING = (" So at the same model and precision the ratio stays near 1: 1.3x would need ours to leave out work "
                "the peer's step does.")
"""The close of records made before the fused default."""


def _peer_overrides(args: argparse.Namespace, chunk: int) -> list[str]:
    return ["config.data.folder=", f"config.data.mined={args.mined}", "config.eval.cosqa=false",
            f"config.grad_cache_chunk={chunk}", *args.override]


def _peer_side(task: Any, chunk: int) -> tuple[Callable[[torch.Tensor], float], Callable[[torch.Tensor], float], str,
                                               Any]:
    """sentence-transformers' step on the task's model folder, data and settings: ``(train step, first-batch loss
    with dropout off, description, the SentenceTransformer)``."""
    import sentence_transformers
    from sentence_transformers.sentence_transformer.losses import (
        CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss,
    )

    cfg = task.cfg
    terms = [dict(t) for t in cfg.objective.terms]
    if len(terms) != 1 or terms[0]["name"] != "infonce" or cfg.prior.get("name", "none") != "none":
        raise SystemExit(f"--against peer compares InfoNCE (MultipleNegativesRankingLoss); this config's terms are {terms}")
    scale = 1.0 / terms[0].get("temperature", 0.05)
    st = _sentence_transformer(cfg.encoder.model, task.ctx.device)
    if chunk:
        loss_fn = CachedMultipleNegativesRankingLoss(st, scale=scale, mini_batch_size=chunk)
        what = f"CachedMultipleNegativesRankingLoss(scale={scale:g}, mini_batch_size={chunk})"
    else:
        loss_fn, what = MultipleNegativesRankingLoss(st, scale=scale), f"MultipleNegativesRankingLoss(scale={scale:g})"
    optimization = build_optimization(cfg.optim, {"encoder": [("encoder", st.parameters())]}, task.steps_per_epoch)
    opt, sched = optimization.optimizers["encoder"], optimization.schedulers["encoder"]
    for group in opt.param_groups:  # the peer on PyTorch's default kernel, as sentence-transformers runs it
        group.update(fused=None, foreach=None)
    lengths = (cfg.encoder.max_query_length, cfg.encoder.max_code_length)

    def features(batch: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        out = []
        for texts, length in zip((task.train.queries, task.train.code), lengths):
            st.max_seq_length = length
            out.append({k: v.to(task.ctx.device) if isinstance(v, torch.Tensor) else v
                        for k, v in st.preprocess([texts[i] for i in batch.tolist()]).items()})
        return out

    step = plain_loop_step(st, opt, lambda batch: loss_fn(features(batch), None), sched)

    @torch.no_grad()
    def first_loss(batch: torch.Tensor) -> float:
        st.eval()
        return float(loss_fn(features(batch), None))

    return step, first_loss, f"sentence-transformers {sentence_transformers.__version__}: {what}, plain loop, AdamW", st


PEER_EPOCH_END = ("sentence-transformers' `fit` runs them with an evaluator and `save_best_model` (its way to keep "
                  "the best checkpoint): `InformationRetrievalEvaluator` on our validation pairs (batch and code "
                  "length of our `config.eval`; its one `max_seq_length` cuts the queries there too, ours at "
                  "`config.encoder.max_query_length`), then `save()` of a better model (no optimizer state)")
"""What the peer's run does at an epoch's end (:func:`_peer_epoch_ends`)."""


def _peer_epoch_ends(task: Any, st: Any) -> Callable[[Path], Callable[[Path], None]]:
    """sentence-transformers' epoch end when its ``fit`` selects a checkpoint: its ``InformationRetrievalEvaluator``
    on the task's validation pairs (query ``i`` relevant to code ``targets[i]``), at the batch size and code length
    of our validation (``config.eval``; its one ``max_seq_length`` for queries and code), then ``st.save(path)``
    when the primary score is the best of the run so far; back to training mode after (``encode`` leaves the model
    in eval). Each call makes a run's handler, with no best yet."""
    from sentence_transformers.sentence_transformer.evaluation import InformationRetrievalEvaluator

    val, e = task.splits["val"], task.cfg.eval
    evaluator = InformationRetrievalEvaluator(
        {str(i): q for i, q in enumerate(val.queries)}, {str(i): c for i, c in enumerate(val.code)},
        {str(i): {str(t)} for i, t in enumerate(val.targets)}, batch_size=e.batch_size, write_csv=False)

    def new_run(folder: Path) -> Callable[[Path], None]:
        best: list[float] = []

        def epoch_end(path: Path) -> None:
            st.max_seq_length = e.max_code_length or task.cfg.encoder.max_code_length
            score = evaluator(st)[evaluator.primary_metric]
            st.train()
            if not best or score > best[0]:
                best[:] = [score]
                st.save(str(path))

        return epoch_end

    return new_run


def _our_first_loss(task: Any, batch: torch.Tensor) -> float:
    """Our loss on ``batch`` with dropout off (the step's tokenisation in length groups, encoder and objective),
    no step."""
    task.net.eval()
    with torch.no_grad():
        loss = float(task.loss(*task.embed_pairs(task._local(batch)), batch))
    task.net.train()
    return loss


def _padded_tokens(task: Any, batches: list[torch.Tensor], chunk: int) -> dict[str, float]:
    """Padded tokens a step (queries and code, mean over ``batches``). Plain step: ours in length groups, the
    peer's padded to each side's longest. GradCache (``chunk``): ours in chunks of length-sorted texts
    (:meth:`CodeSearchTask.cached_pieces`), the peer's mini-batches in batch order, each trimmed to its longest."""
    enc, ours, peer = task.encoder, 0, 0
    for batch in batches:
        local = task._local(batch)
        for kind in ("query", "code"):
            chosen, length = task.pair_texts(local, kind), enc.max_length(kind)
            pieces = [chosen[s : s + chunk] for s in range(0, len(chosen), chunk)] if chunk else [chosen]
            peer += sum(enc.tokenize(piece, length)["input_ids"].numel() for piece in pieces)
            if not chunk:
                ours += sum(tokens["input_ids"].numel() for _, tokens in enc.tokenize_groups(chosen, length))
        if chunk:
            ours += sum(q["input_ids"].numel() + c["input_ids"].numel() for q, c in task.cached_pieces(local, chunk)[0])
    return {"ours": ours / len(batches), "peer": peer / len(batches)}


def _comparison(args: argparse.Namespace, chunk: int, run_dir: Path) -> dict[str, Any]:
    """One comparison (plain step when ``chunk`` is 0, else GradCache): its loss check, rounds and ratio."""
    task, loaded = cpu_task(args.config, _peer_overrides(args, chunk), args.data_root, run_dir)
    retaining = retaining_sides(loaded)
    batches = [b for _, b in zip(range(args.batches), task.batches(0))]
    peer_step, peer_first, peer_desc, peer_model = _peer_side(task, chunk)
    ours_first = _our_first_loss(task, batches[0])
    theirs_first = peer_first(batches[0])
    ours = our_step(task)
    kernel = optimizer_kernel(task.optimizers()["encoder"])
    ours(batches[0])  # a warm-up step each
    peer_step(batches[0])
    sides = {"ours": ours, "peer": peer_step}
    rounds = alternate(sides, batches, args.repeats, args.steps, retaining=retaining)
    profiles = profile_sides(sides, batches, args.steps, retaining=retaining) if args.profile else None
    compute = compute_bound(ours, batches[0]) if args.profile else None
    as_user = {}
    if args.to_checkpoint and not chunk:  # the config as a user trains it: its plain step
        # the embedding cache off: a rerun at the same seed would read the first run's validation embeddings
        mined = [f"config.data.mined={args.mined}"] * (task.cfg.data.mined != args.mined)
        overrides = [*mined, *args.override, "config.eval.cache=false"]
        peer_run = PeerRun(peer_step, list(task.batches(0)), task.steps_per_epoch, _peer_epoch_ends(task, peer_model))
        as_user = {"to_checkpoint": to_checkpoint_rounds(args.config, overrides, args.data_root, peer_run,
                                                         args.repeats, run_dir / "as_user", retaining=retaining),
                   "peer_epoch_end_what": PEER_EPOCH_END}
    enc = task.cfg.encoder
    return {
        "step": f"GradCache, chunk {chunk}" if chunk else "plain", "grad_cache_chunk": chunk,
        "ours": ours_text(args.config, detail=(f", config.grad_cache_chunk={chunk}" if chunk else "")
                          + f", AdamW ({kernel} kernel)"), "ours_optimizer": kernel, **host_allocator_fields(retaining),
        "peer": peer_desc, "batch": int(task.cfg.batch_size), "max_query_length": enc.max_query_length,
        "max_code_length": enc.max_code_length, "model": enc.model, "distinct_batches": len(batches),
        "group_cost_tokens": enc.group_cost_tokens, "padded_tokens": _padded_tokens(task, batches, chunk),
        **outcome(ours_first, theirs_first, rounds, args.clock, dropout="off"),
        **({"profile": profiles, "compute": compute} if profiles else {}), **as_user,
    }


def against_peer(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, Any]:
    """The ``--against peer`` record: the plain step and the GradCache step, each beside sentence-transformers'."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread for the tokenizer too, on both sides
    chunks = [0] + ([args.grad_cache_chunk] if args.grad_cache_chunk else [])
    with tempfile.TemporaryDirectory() as run_dir:
        comparisons = [_comparison(args, chunk, Path(run_dir)) for chunk in chunks]
    own = {"config": args.config, "mined": args.mined, "overrides": list(args.override), "comparisons": comparisons}
    # --precision and --device are the other mode's: the comparison runs fp32 on the CPU (cpu_task)
    cpu_fp32 = argparse.Namespace(**{**vars(args), "precision": "fp32", "device": "cpu"})
    mine = {key: comparisons[0][key] for key in ("ours_optimizer", "ours_host_allocator")}
    record = peer_record(SECTION, cpu_fp32, argv, {}, [], {**own, **mine})
    if args.config != DEFAULT_CONFIG:
        record["section"] += f"+{Path(args.config).name}"
    return record


def padding_line(c: dict[str, Any]) -> str:
    """A comparison's padding in words: our padded tokens a step against the peer's."""
    tokens, cost = c["padded_tokens"], c["group_cost_tokens"]
    if c["grad_cache_chunk"]:
        how, theirs = ("in chunks of length-sorted texts" if cost is not None else "in chunks in batch order",
                       "mini-batches in batch order, each trimmed to its longest")
    else:
        how = (f"in length groups (`config.encoder.group_cost_tokens` = {cost})" if cost is not None
               else "to each side's longest, as the peer (`config.encoder.group_cost_tokens` = null)")
        theirs = "padded to each side's longest"
    return (f"- padding ({c['step'] if c['grad_cache_chunk'] else 'plain step'}): ours pads {how}: "
            f"{tokens['ours']:,.0f} padded tokens a step (queries and code) against the peer's {tokens['peer']:,.0f}, "
            f"{theirs} ({tokens['ours'] / tokens['peer']:.2f} of the peer's)")


def grouped_closing(plain: dict[str, Any]) -> str | None:
    """The close of the "where the time goes" paragraph when our plain step padded fewer tokens than the peer's
    (None otherwise: the shared closes apply)."""
    tokens = plain.get("padded_tokens")
    if not tokens or tokens["ours"] >= tokens["peer"]:
        return None
    return (f" So the plain steps differ by the padding first (ours computes {tokens['ours'] / tokens['peer']:.2f} of the "
            f"peer's padded tokens, the data lines), then by {differences(plain)}.")


def render_peer(record: dict[str, Any]) -> str:
    """The page section of an ``--against peer`` record (markdown)."""
    clock = record["clock"]
    first = record["comparisons"][0]
    lines = [
        heading("code_search: our step vs sentence-transformers" + ("" if record["section"] == SECTION
                                                                    else f", config `{record['config']}`"), record), "",
        f"- data: mined set `{record['mined']}` (config `{record['config']}`), model `{first['model']}`, batch "
        f"{first['batch']} pairs, queries at {first['max_query_length']} tokens and code at {first['max_code_length']}, "
        f"{first['distinct_batches']} distinct batches cycled by both sides; both tokenize inside the step",
        *(padding_line(c) for c in record["comparisons"] if "padded_tokens" in c),
        *(line for c in record["comparisons"] for line in host_memory_lines(c, f" ({c['step']})")),
        *machine_lines(record), "",
        "| step | ours | peer | first-batch loss ours / peer (dropout off) | ours ms/step | peer ms/step | peer / ours (median) | min | max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in record["comparisons"]:
        check = c["loss_check"]
        verdict = "equal" if check["equal"] else "NOT equal"
        ours_ms = statistics.median(1000 * r[f"ours_{clock}_s"] for r in c["rounds"])
        peer_ms = statistics.median(1000 * r[f"peer_{clock}_s"] for r in c["rounds"])
        lines.append(f"| {c['step']} | {c['ours']} | {c['peer']} | {check['ours']:.6f} / {check['peer']:.6f} ({verdict}) "
                     f"| {ours_ms:.0f} | {peer_ms:.0f} | **{c['ratio_median']:.2f}** | {c['ratio_min']:.2f} | {c['ratio_max']:.2f} |")
    lines += ["", f"Per round ({record['repeats']} alternating rounds of {record['steps_per_round']} steps per side; "
              f"ms per step, {clock} clock, then wall clock):", "",
              "| step | round | ours | peer | ours (wall) | peer (wall) | peer / ours |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {c['step']} | {i + 1} | {round_cells(r, clock, 1000, 0)} |"
              for c in record["comparisons"] for i, r in enumerate(c["rounds"])]
    if not record.get("levers") or "profile" in first:
        where = where_words(record, WHERE, "AdamW", "`sqrt`, `lerp_`, `addcdiv_`, `addcmul_`", LOOP_CLOSING,
                            closing=grouped_closing(first))
        lines.append(profile_note(record, where + " The first table is the plain step's.", first.get("profile")))
        lines[-1] += ceiling_text({"clock": clock, **first})
        lines += [f"\n{c['step']}: {checks_text(c['profile'])}\n\n{profile_table(c['profile'])}"
                  + ceiling_text({"clock": clock, **c}) for c in record["comparisons"][1:] if "profile" in c]
    if "to_checkpoint" in first:
        lines.append(checkpoint_sentence({"clock": clock, **first}))
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contrasuite bench code_search", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per mode (the fastest is reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--max-query-length", type=int, default=32)
    parser.add_argument("--max-code-length", type=int, default=128)
    parser.add_argument("--precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch threads on the CPU (0: default)")
    parser.add_argument("--modes", nargs="+", choices=("plain", "gradcache", *EMBED_MODES), default=["plain", "gradcache", *EMBED_MODES])
    parser.add_argument("--corpus", choices=("stdlib", "cosqa"), default="stdlib", help="code the embedding rows embed")
    parser.add_argument("--texts", type=int, default=0, help="texts the embedding rows embed (0: all of CoSQA, 512 of email)")
    parser.add_argument("--embed-batch", type=int, default=64, help="batch size of the embedding rows")
    parser.add_argument("--data-root", default=os.environ.get("CONTRASUITE_DATA"), help="for --corpus cosqa")
    parser.add_argument("--out", type=Path, default=Path("runs/bench/code_search.json"))
    peer = parser.add_argument_group("--against peer (our training step against sentence-transformers')")
    peer.add_argument("--against", choices=("peer",), default=None)
    peer.add_argument("--config", default=DEFAULT_CONFIG, help="our side's config")
    peer.add_argument("--mined", default="smoke", help="the named mined set both sides train on")
    peer.add_argument("--grad-cache-chunk", type=int, default=8, help="GradCache chunk = CachedMNRL mini-batch (0: no GradCache row)")
    peer_flags(peer, RECORD, {}, batches=6, profile=True, to_checkpoint=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.against or args.report:
        return peer_main(args, argv, against_peer, render_peer)
    if args.batch % args.chunk:
        parser.error(f"--batch {args.batch} must be a multiple of --chunk {args.chunk}")
    if args.corpus == "cosqa" and not args.data_root:
        parser.error("--corpus cosqa needs the data root: --data-root DIR or $CONTRASUITE_DATA")
    ctx = mp.get_context("spawn")
    rows, embeddings = [], {}
    for mode in args.modes:
        queue = ctx.Queue()
        proc = ctx.Process(target=_run, args=(mode, vars(args) | {"out": None}, queue))
        proc.start()
        result = _result(proc, queue)
        proc.join()
        if result is None or proc.exitcode != 0:
            rows.append({"mode": mode, "batch": args.batch, "error": f"exit code {proc.exitcode} (out of memory?)"})
        else:
            rows.append(result[0])
            if result[1] is not None:
                embeddings[mode] = result[1]
        if mode == "sentence-transformers" and {"embed", mode} <= embeddings.keys():
            rows[-1]["max_abs_diff"] = float(np.abs(embeddings["embed"] - embeddings[mode]).max())
        print(json.dumps(rows[-1]))
    result = {"settings": {k: str(v) for k, v in vars(args).items()}, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(), "cpu_threads": torch.get_num_threads(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    steps = [table_line(r) for r in rows if r["mode"] not in EMBED_MODES]
    if steps:
        print(STEP_HEADER + "\n|---|---|---|---|---|\n" + "\n".join(steps))
    embeds = [table_line(r) for r in rows if r["mode"] in EMBED_MODES]
    if embeds:
        print(EMBED_HEADER + "\n|---|---|---|---|---|---|\n" + "\n".join(embeds))
    print(f"wrote {args.out}")
    return 0


def _result(proc: mp.Process, queue: mp.Queue) -> tuple[dict, np.ndarray | None] | None:
    """The child's result, read before joining it (a large one blocks its exit), or None if it died without one."""
    while True:
        try:
            return queue.get(timeout=1.0)
        except Empty:
            if proc.exitcode is not None:
                try:
                    return queue.get(timeout=1.0)
                except Empty:
                    return None
