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

    contrasuite bench code_search --batch 1024 --chunk 32          # a GPU
    contrasuite bench code_search --batch 64 --chunk 16 --steps 1  # a small CPU check
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import resource
import sysconfig
import time
from pathlib import Path
from typing import Sequence

import torch

from contrasuite.core.gradcache import cached_backward
from contrasuite.core.objectives import InfoNCE
from contrasuite.domains.code_search.encoder import BiEncoder, EncoderConfig
from contrasuite.domains.code_search.mine import iter_functions, summary


def _texts(n: int) -> tuple[list[str], list[str]]:
    fns = [f for f in iter_functions(Path(sysconfig.get_paths()["stdlib"]) / "email")
           if not isinstance(f, tuple) and f.docstring and f.code]
    fns = [fns[i % len(fns)] for i in range(n)]
    return [summary(f.docstring) for f in fns], [f.code for f in fns]


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def _run(mode: str, args: dict, queue: mp.Queue) -> None:
    torch.manual_seed(0)
    if args["threads"]:
        torch.set_num_threads(args["threads"])
    device = torch.device(args["device"])
    cfg = EncoderConfig(model=args["model"], max_query_length=args["max_query_length"], max_code_length=args["max_code_length"])
    enc = BiEncoder(cfg).to(device).train()
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-5)
    loss_fn = InfoNCE(temperature=0.05)
    queries, code = _texts(args["batch"])
    q_tok = {k: v.to(device) for k, v in enc.tokenize(queries, cfg.max_query_length).items()}
    c_tok = {k: v.to(device) for k, v in enc.tokenize(code, cfg.max_code_length).items()}
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args["precision"])

    def embed(sl: slice) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
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
    queue.put({"mode": mode, "batch": args["batch"], "chunk": args["chunk"] if mode == "gradcache" else args["batch"],
               "seconds_per_step": sec, "pairs_per_s": args["batch"] / sec, "peak_mb": peak, "memory": kind})


def main(argv: Sequence[str] | None = None) -> int:
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
    parser.add_argument("--modes", nargs="+", choices=("plain", "gradcache"), default=["plain", "gradcache"])
    parser.add_argument("--out", type=Path, default=Path("runs/bench/code_search.json"))
    args = parser.parse_args(argv)
    if args.batch % args.chunk:
        parser.error(f"--batch {args.batch} must be a multiple of --chunk {args.chunk}")
    ctx = mp.get_context("spawn")
    rows = []
    for mode in args.modes:
        queue = ctx.Queue()
        proc = ctx.Process(target=_run, args=(mode, vars(args) | {"out": None}, queue))
        proc.start()
        proc.join()
        if proc.exitcode != 0:
            rows.append({"mode": mode, "batch": args.batch, "error": f"exit code {proc.exitcode} (out of memory?)"})
        else:
            rows.append(queue.get())
        print(json.dumps(rows[-1]))
    result = {"settings": {k: str(v) for k, v in vars(args).items()}, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(), "cpu_threads": torch.get_num_threads(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print("| mode | batch | chunk | pairs/s | peak MB |\n|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['mode']} | {r['batch']} | - | {r['error']} | - |")
        else:
            print(f"| {r['mode']} | {r['batch']} | {r['chunk']} | {r['pairs_per_s']:.1f} | {r['peak_mb']:.0f} |")
    print(f"wrote {args.out}")
    return 0
