"""``ImageTextTask``: CLIP-style fine-tuning with generated hard negatives in both modalities.

A step takes a batch of image-caption pairs and, when enabled, each pair's hard negatives: up to
``hard_negatives.texts_per_pair`` negative captions (negative columns of the image->text direction)
and ``hard_negatives.images_per_pair`` negative images (negative columns of the text->image
direction), NegCLIP-style (Yuksekgonul et al., ICLR 2023); with ``hard_negatives.image_pairs`` a
negative image also brings its true caption, as a pair, so it is contrasted in both directions (GNM,
Sahin et al., WACV 2024). Images and texts form one block scored by the configured objective terms
(``clip``, ``siglip``) through the core contract: ``pos_mask`` marks every true (image, caption)
match, so a negative whose true caption is a caption of the batch (or which nearly copies an image
of the batch, ``same_as``) counts as a positive there, never as a false negative; rows without a
positive (negative-only texts or images) are candidates only; ``neg_weight``
(``hard_negatives.weight``) up-weights negatives made from the same emoji. Splits are by emoji group,
with every emoji and the emoji its negative images copy in one group (:func:`split_pairs`), and a
negative that is (or depicts) a validation or test caption is never used in training.

With ``model.freeze_trunks`` the trunks run once over every image, caption and negative and their
features are cached on disk (``cache_dir``, :mod:`~contrasuite.domains.image_text.features`; under
several processes rank 0 computes them and the others read its files), so a step trains only the heads
and the loss scale. Generated negatives are cached there too (:func:`~contrasuite.domains.image_text.negatives.cached_generate`),
and every setup phase shows a bar through ``ctx.progress``. No augmentation is applied: a flip or colour jitter
would change the caption's meaning.
``gradcache_chunks > 1`` computes the step with GradCache (same gradient, one chunk of
activations at a time).

On several processes ``batch_size`` is the global batch: every rank builds the same batch (pairs,
sampled hard negatives, masks), embeds its contiguous part of the images and of the texts, and scores
them through :func:`~contrasuite.core.distributed.distributed_objective` (its images' rows of the
masks against every rank's texts), so every negative counts and the step equals the one-process step
(parameter gradients averaged over ranks by hooks, the towers being called through methods DDP cannot
wrap).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any, Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.distributed import average_gradients_over_ranks, distributed_objective, rank_part
from contrasuite.core.objectives import ObjectiveSum
from contrasuite.core.task.optim import build_optimization
from contrasuite.core.task.protocol import SmokeSettings, StepContext, TaskContext, shown
from contrasuite.domains.averaging import check_decay, start_average, update_average
from contrasuite.domains.image_text.captions import normalise
from contrasuite.domains.image_text.config import ImageTextConfig
from contrasuite.domains.image_text.evaluate import image_side, retrieval, text_side
from contrasuite.domains.image_text.features import trunk_features
from contrasuite.domains.image_text.models import TopAndHead, build_model
from contrasuite.domains.image_text.negatives import cached_generate, read_negatives
from contrasuite.domains.image_text.style_data import StyleData, load_pairs, split_pairs, style_data
from contrasuite.domains.init_from import load_weights


class ImageTextTask:
    config_class = ImageTextConfig
    smoke = SmokeSettings(
        8, ("config.data.limit=30", "config.gradcache_chunks=0", "config.eval_batch_size=64"),
        live_batch=lambda cfg: cfg.batch_size // cfg.gradcache_chunks if cfg.gradcache_chunks > 1 else cfg.batch_size,
    )

    def setup(self, ctx: TaskContext) -> None:
        self.ctx, cfg = ctx, ctx.config
        self.cfg = cfg
        styles = load_pairs(cfg, ctx.data_root, ctx.progress)
        train_style = next(iter(styles))
        if cfg.negatives_file:
            with shown(ctx.progress, f"reading {cfg.negatives_file}"):
                texts, images = read_negatives(cfg.negatives_file)
        else:
            texts, images = cached_generate(styles, cfg.negatives, cfg.cache_dir, ctx.progress)
        train = styles[train_style]
        self.splits = split_pairs(train, images, cfg.data)
        self.split_keys = {name: [train.keys[r] for r in rows] for name, rows in self.splits.items()}
        self.text_records = texts
        self.styles = {s: style_data(p, *images.get(s, ([], []))) for s, p in styles.items()}
        self.train_style = train_style
        # a held-out caption never enters training, not even as a negative ("cat face" -> "dog face")
        self.held_out = {normalise(train.captions[r]) for split in ("val", "test") for r in self.splits[split]}
        self.text_negs: dict[str, list[str]] = {}
        for rec in texts:
            if normalise(rec["negative"]) not in self.held_out:
                self.text_negs.setdefault(rec["key"], []).append(rec["negative"])
        with shown(ctx.progress, f"loading the {cfg.model.name} towers"):
            self.model = ctx.lay_out(build_model(cfg.model).to(ctx.device))
        self.objective = ObjectiveSum(cfg.objective.terms).to(ctx.device)
        if cfg.init_from:
            load_weights(cfg.init_from, {"model": self.model, "objective": self.objective}, which="last")
        if ctx.world_size > 1:  # the towers are called through methods, not forward: no DDP wrapper
            average_gradients_over_ranks(self.model)
            average_gradients_over_ranks(self.objective)
        check_decay(cfg.ema)
        self.model_ema = None
        if cfg.ema > 0:  # same architecture, weights copied from the model (not read from disk again)
            shell = build_model(replace(cfg.model, pretrained_trunks=False, pretrained=None))
            self.model_ema = start_average(ctx.lay_out(shell.to(ctx.device)), self.model)
            self.model_ema.omit_frozen_trunks = self.model.omit_frozen_trunks  # its trunks are the model's
        self.frozen = cfg.model.freeze_trunks
        texts_all = list(dict.fromkeys([*styles[train_style].captions, *(r["negative"] for r in texts)]))
        self.text_row = {t: i for i, t in enumerate(texts_all)}
        self.text_features = trunk_features(self.model, cfg.model, cfg.cache_dir, self.styles, texts_all,
                                            cfg.eval_batch_size, ctx.autocast, ctx.progress, ctx.rank) if self.frozen else None
        self.optimization = build_optimization(cfg.optim, {"model": self._parts()}, self.steps_per_epoch)

    def _parts(self) -> list[tuple[str, list[nn.Parameter]]]:
        """Trainable parameters of ``model`` and ``objective``, then the pretrained top layers (:class:`TopAndHead`
        ``top``) as the part ``trunk``."""
        head = self.model.image_head
        top = {id(p) for p in head.top.parameters()} if isinstance(head, TopAndHead) else set()
        trained = {name: [p for p in module.parameters() if p.requires_grad]
                   for name, module in (("model", self.model), ("objective", self.objective))}
        return [*((name, [p for p in params if id(p) not in top]) for name, params in trained.items()),
                ("trunk", [p for params in trained.values() for p in params if id(p) in top])]

    # ---------------------------------------------------------------- embedding
    def _images_in(self, style: StyleData, rows: list[int]) -> Tensor:
        if self.frozen:
            return style.features[rows].to(self.ctx.device).float()
        return torch.from_numpy(style.images[rows])

    def _texts_in(self, texts: list[str]) -> Tensor | list[str]:
        if self.frozen:
            return self.text_features[[self.text_row[t] for t in texts]].to(self.ctx.device).float()
        return texts

    def _embed_images(self, x: Tensor, model: nn.Module | None = None) -> Tensor:
        if len(x) == 0:
            return self._empty()
        model = self.model if model is None else model
        return model.image_head(x) if self.frozen else model.encode_image(x)

    def _embed_texts(self, x: Tensor | list[str], model: nn.Module | None = None) -> Tensor:
        if len(x) == 0:
            return self._empty()
        model = self.model if model is None else model
        return model.text_head(x) if self.frozen else model.encode_text(x)

    def _empty(self) -> Tensor:
        """No rows, but attached to the graph (GradCache back-propagates every chunk's outputs)."""
        anchor = next(p for p in self.model.parameters() if p.requires_grad)
        return torch.zeros(0, self.model.embed_dim, device=self.ctx.device) + 0 * anchor.sum()

    # ---------------------------------------------------------------- training
    def modules(self) -> Mapping[str, nn.Module]:
        average = {} if self.model_ema is None else {"model_ema": self.model_ema}
        return {"model": self.model, "objective": self.objective, **average}

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return self.optimization.optimizers

    def schedulers(self) -> Mapping[str, Any]:
        return self.optimization.schedulers

    @property
    def steps_per_epoch(self) -> int:
        """Batches of :meth:`batches`: the training pairs in global batches, a last one of fewer than two dropped."""
        full, rest = divmod(len(self.splits["train"]), self.cfg.batch_size)
        return full + (rest >= 2)

    def batches(self, epoch: int) -> Iterator[dict]:
        """Train pairs in a ``(seed, epoch)`` order, each with its sampled negatives, as one block.

        ``image_rows``/``texts`` are the pairs' images and captions followed by the negative images and
        texts; ``pos_mask[i, t]`` is True where text ``t`` is a true caption of image ``i`` (a negative
        equal to a caption of the batch is a positive there, not a false negative); ``neg_weight`` (only
        when ``hard_negatives.weight != 1``) weights the negatives made from the same emoji as the row;
        ``focus_weight`` (only when ``hard_negatives.focus_weight > 0``) is 1 at the positives and those
        negatives, 0 elsewhere.
        """
        cfg, style = self.cfg, self.styles[self.train_style]
        hard = cfg.hard_negatives
        rng = random.Random(f"{self.ctx.seed}-{epoch}")
        order = list(self.splits["train"])
        rng.shuffle(order)
        by_key: dict[str, list[int]] = {}
        for j, rec in enumerate(style.neg_records):
            if not style.neg_truths[j] & self.held_out:
                by_key.setdefault(rec["key"], []).append(j)
        for start in range(0, len(order), cfg.batch_size):
            rows = order[start: start + cfg.batch_size]  # the global batch, the same on every rank
            if len(rows) < 2:  # a contrastive batch needs a negative
                continue
            keys = [style.pairs.keys[r] for r in rows]
            image_rows, image_sources = list(rows), list(keys)
            truths = [{normalise(style.pairs.captions[r])} for r in rows]
            texts = {normalise(style.pairs.captions[r]): style.pairs.captions[r] for r in rows}
            made_from: dict[str, set[str]] = {}  # normalised negative text -> the emoji it was made from
            neg_images = neg_texts = 0
            for key in keys:
                if hard.images:
                    pool = by_key.get(key, [])
                    for j in rng.sample(pool, k=min(hard.images_per_pair, len(pool))):
                        image_rows.append(style.neg_rows[j])
                        truths.append(style.neg_truths[j])
                        image_sources.append(key)
                        neg_images += 1
                        if hard.image_pairs:
                            text = style.neg_records[j]["negative"]
                            texts.setdefault(normalise(text), text)
                            made_from.setdefault(normalise(text), set()).add(key)
                if hard.texts:
                    pool = self.text_negs.get(key, [])
                    for text in rng.sample(pool, k=min(hard.texts_per_pair, len(pool))):
                        neg_texts += normalise(text) not in texts
                        texts.setdefault(normalise(text), text)
                        made_from.setdefault(normalise(text), set()).add(key)
            text_keys = list(texts)
            column = {t: j for j, t in enumerate(text_keys)}
            pos_mask = bool_matrix((len(truths), len(text_keys)),
                                   [(i, column[t]) for i, truth in enumerate(truths) for t in truth if t in column])
            batch = {"rows": rows, "captions": [style.pairs.captions[r] for r in rows], "image_rows": image_rows,
                     "texts": [texts[t] for t in text_keys], "pos_mask": pos_mask,
                     "neg_images": neg_images, "neg_texts": neg_texts}
            if hard.weight != 1.0 or hard.focus_weight > 0:
                # A text and an image are "the same emoji" when one was made from the emoji the other
                # shows or captions (a negative caption of it, or its caption against a negative image).
                for r, key in zip(rows, keys):
                    made_from.setdefault(normalise(style.pairs.captions[r]), set()).add(key)
                rows_of: dict[str, list[int]] = {}
                for i, source in enumerate(image_sources):
                    rows_of.setdefault(source, []).append(i)
                same = bool_matrix(pos_mask.shape, [
                    (i, j) for j, t in enumerate(text_keys) for source in made_from.get(t, ())
                    for i in rows_of.get(source, ())])
                if hard.weight != 1.0:
                    batch["neg_weight"] = torch.where(same & ~pos_mask, hard.weight, 1.0)
                if hard.focus_weight > 0:
                    batch["focus_weight"] = (same | pos_mask).float()
            yield batch

    def train_step(self, batch: dict, step: StepContext) -> Mapping[str, float]:
        style = self.styles[self.train_style]
        device = self.ctx.device
        pos_mask = batch["pos_mask"].to(device)
        neg_weight = batch["neg_weight"].to(device) if "neg_weight" in batch else None
        rank, world = self.ctx.rank, self.ctx.world_size  # each rank embeds its part of the global batch
        image_rows, texts = batch["image_rows"], batch["texts"]
        mine = rank_part(len(image_rows), rank, world)
        inputs = (self._images_in(style, image_rows[mine]), self._texts_in(texts[rank_part(len(texts), rank, world)]))

        def embed(chunk):
            return self._embed_images(chunk[0]), self._embed_texts(chunk[1])

        focus = batch["focus_weight"].to(device) if "focus_weight" in batch else None
        # The masks' rows of this rank's images, against every rank's texts: the core scores the split
        # batch by each term's declared behaviour (CLIP: the gathered whole; SigLIP: the ring), and the
        # parameter hooks average the ranks' gradients, which gives the one-process gradient.
        local = {"pos_mask": pos_mask[mine], **({} if neg_weight is None else {"neg_weight": neg_weight[mine]})}

        terms: dict[str, Tensor] = {}

        def loss_fn(images, texts):
            terms.update(self.objective.parts(images, texts, via=distributed_objective, **local))
            if focus is not None:  # the same objective with only the hard negatives in its denominators
                parts = self.objective.parts(images, texts, pos_mask=local["pos_mask"], neg_weight=focus[mine],
                                             via=distributed_objective)
                terms["focus"] = self.cfg.hard_negatives.focus_weight * sum(parts.values())
            return sum(terms.values())

        n = self.cfg.gradcache_chunks
        if n > 1:
            chunks = list(zip(*(_split(x, n) for x in inputs)))
            loss = step.optimize_cached("model", embed, chunks, loss_fn, terms=terms)
        else:
            with step.autocast():
                reps = embed(inputs)
            loss = loss_fn(*reps)
            step.optimize("model", loss, terms=terms)
        if self.model_ema is not None:
            update_average(self.model_ema, self.model, self.cfg.ema)
        return {"loss": float(loss.detach()), "neg_texts": float(batch["neg_texts"]),
                "neg_images": float(batch["neg_images"])}

    # ---------------------------------------------------------------- evaluation
    @torch.no_grad()
    def _embed_all(self, style: StyleData, rows: list[int], texts: list[str]) -> tuple[Tensor, Tensor]:
        bs, model = self.cfg.eval_batch_size, self.model_ema  # the weight average when there is one
        imgs, txts = [], []
        with self.ctx.autocast():
            starts = range(0, len(rows), bs)
            for s in self.ctx.progress(starts, f"embedding {len(rows)} images", total=len(starts)):
                imgs.append(self._embed_images(self._images_in(style, rows[s: s + bs]), model).float())
            starts = range(0, len(texts), bs)
            for s in self.ctx.progress(starts, f"embedding {len(texts)} texts", total=len(starts)):
                txts.append(self._embed_texts(self._texts_in(texts[s: s + bs]), model).float())
        return F.normalize(torch.cat(imgs), dim=-1).cpu(), F.normalize(torch.cat(txts), dim=-1).cpu()

    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        if split not in self.splits:
            raise ValueError(f"split must be one of {list(self.splits)}, got {split!r}")
        out: dict[str, float] = {}
        for name, style in self.styles.items():
            index = {k: i for i, k in enumerate(style.pairs.keys)}
            rows = [index[k] for k in self.split_keys[split] if k in index]
            keys = {style.pairs.keys[r] for r in rows}
            captions = [style.pairs.captions[r] for r in rows]
            recs = [r for r in self.text_records if r["key"] in keys]
            neg_idx = [j for j, r in enumerate(style.neg_records) if r["key"] in keys]
            texts = list(dict.fromkeys([*captions, *(r["negative"] for r in recs)]))
            image_rows = list(rows) + [style.neg_rows[j] for j in neg_idx]
            img, txt = self._embed_all(style, image_rows, texts)
            text_emb = dict(zip(texts, txt))
            image_emb = {style.pairs.keys[r]: img[i] for i, r in enumerate(rows)}
            prefix = "" if name == self.train_style else f"{name}/"
            metrics = retrieval(img[: len(rows)], captions, text_emb)
            metrics.update(text_side(image_emb, text_emb, recs))
            metrics.update(image_side(image_emb, img[len(rows):], text_emb, [style.neg_records[j] for j in neg_idx]))
            out.update({prefix + k: v for k, v in metrics.items()})
        return out

    def embed_for_health(self, batch: dict) -> tuple[Tensor, Tensor]:
        style = self.styles[self.train_style]
        return (self._embed_images(self._images_in(style, batch["rows"])),
                self._embed_texts(self._texts_in(batch["captions"])))


def bool_matrix(shape: tuple[int, int], true_at: list[tuple[int, int]]) -> Tensor:
    """A bool ``shape`` matrix, True at the ``(row, column)`` pairs of ``true_at``: a batch's masks set from each
    row's few members, not tested cell by cell in Python (a 256 x 256 mask from nested lists took 11 ms a batch in a
    one-off cProfile of a reduced_align run)."""
    out = torch.zeros(shape, dtype=torch.bool)
    if true_at:
        rows, columns = torch.tensor(true_at).unbind(1)
        out[rows, columns] = True
    return out


def _split(x: Tensor | list, n: int) -> list:
    if isinstance(x, list):
        size = -(-len(x) // n) if x else 0
        return [x[i * size: (i + 1) * size] for i in range(n)]
    return list(torch.tensor_split(x, n))
