"""``ImageTextTask``: CLIP-style fine-tuning with generated hard negatives in both modalities.

A step takes a batch of image-caption pairs and, when enabled, each pair's hard negatives: up to
``hard_negatives.texts_per_pair`` negative captions (extra columns of the image->text direction) and
``hard_negatives.images_per_pair`` negative images (extra columns of the text->image direction); the
configured objective terms (``clip``, ``siglip``) take them as ``extra_texts`` / ``extra_images``
(NegCLIP, Yuksekgonul et al., ICLR 2023; GNM, Sahin et al., WACV 2024). A negative whose true caption
equals a caption of the batch would be a false negative there and is left out; pairs with equal
captions are positives of each other (``pos_mask``).

With ``model.freeze_trunks`` the trunks run once over every image, caption and negative and their
features are cached on disk (``cache_dir``), so a step trains only the heads and the loss scale. No
augmentation is applied: a flip or colour jitter would change the caption's meaning.
``hard_negatives.gradcache_chunks > 1`` computes the step with GradCache (same gradient, one chunk of
activations at a time).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from contrasuite.core.objectives import ObjectiveSum
from contrasuite.domains.image_text.captions import normalise
from contrasuite.domains.image_text.data import PairSet, load_captions, load_emoji, split_groups
from contrasuite.domains.image_text.evaluate import image_side, retrieval, text_side
from contrasuite.domains.image_text.models import ModelConfig, build_model
from contrasuite.domains.image_text.negatives import NegativesConfig, generate, read_negatives
from contrasuite.domains.task import StepContext, TaskContext


@dataclass
class DataConfig:
    """``config.data``."""

    source: str = "emoji"
    """``emoji`` (``<data_root>/emoji``) or ``captions`` (``captions_file`` + ``image_root``)."""
    style: str = "twitter"
    """Emoji style trained and tested on (``twitter``: Twemoji)."""
    unseen_style: Optional[str] = "google"
    """Emoji style only evaluated, never trained on (``google``: Noto); null: none."""
    captions_file: Optional[str] = None
    image_root: Optional[str] = None
    val_fraction: float = 0.1
    test_fraction: float = 0.2
    split_seed: int = 0
    """Seed of the split by group (fixed across training seeds)."""
    limit: int = 0
    """Emoji: keep only the first ``limit`` base emoji (0: all), for smoke runs."""


@dataclass
class HardNegativeConfig:
    """``config.hard_negatives``: which negatives a training step uses."""

    texts: bool = False
    images: bool = False
    texts_per_pair: int = 3
    images_per_pair: int = 2


@dataclass
class ObjectiveConfig:
    terms: list[dict[str, Any]] = field(default_factory=lambda: [{"name": "clip", "weight": 1.0}])


@dataclass
class ImageTextConfig:
    """The ``config:`` section of an ``image_text`` run."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    negatives: NegativesConfig = field(default_factory=NegativesConfig)
    negatives_file: Optional[str] = None
    """A file from ``contrasuite generate-negatives``; null: generate in memory from ``negatives``."""
    hard_negatives: HardNegativeConfig = field(default_factory=HardNegativeConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    init_from: Optional[str] = None
    """A run folder or checkpoint whose ``model`` and ``objective`` start this run (stage 2 after alignment)."""
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01
    gradcache_chunks: int = 0
    eval_batch_size: int = 512
    cache_dir: Optional[str] = None
    """Trunk-feature cache (default ``$CONTRASUITE_CACHE`` or ``~/.cache/contrasuite``)."""


@dataclass
class StyleData:
    """One style's pairs, the rows of its negative images, and (cached) trunk inputs or features."""

    pairs: PairSet
    images: np.ndarray
    """Pairs' images followed by the generated negative images."""
    neg_records: list[dict]
    neg_rows: list[int]
    features: Tensor | None = None


class ImageTextTask:
    config_class = ImageTextConfig

    def setup(self, ctx: TaskContext) -> None:
        self.ctx, cfg = ctx, ctx.config
        self.cfg = cfg
        styles = self._load_pairs(cfg, ctx.data_root)
        train_style = next(iter(styles))
        self.splits = split_groups(styles[train_style].groups, (cfg.data.val_fraction, cfg.data.test_fraction),
                                   cfg.data.split_seed)
        if cfg.negatives_file:
            texts, images = read_negatives(cfg.negatives_file)
        else:
            texts, images = generate(styles, cfg.negatives)
        self.text_records = texts
        self.styles = {s: self._style_data(p, *images.get(s, ([], []))) for s, p in styles.items()}
        self.train_style = train_style
        self.text_negs: dict[str, list[str]] = {}
        for rec in texts:
            self.text_negs.setdefault(rec["key"], []).append(rec["negative"])
        self.model = build_model(cfg.model).to(ctx.device)
        self.objective = ObjectiveSum(cfg.objective.terms).to(ctx.device)
        if cfg.init_from:
            self._init_from(Path(cfg.init_from))
        self.net = ctx.wrap(self.model)
        self.frozen = cfg.model.freeze_trunks
        texts_all = list(dict.fromkeys([*styles[train_style].captions, *(r["negative"] for r in texts)]))
        self.text_row = {t: i for i, t in enumerate(texts_all)}
        self.text_features = self._cached_features(texts_all) if self.frozen else None
        params = [p for m in (self.model, self.objective) for p in m.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)

    # ---------------------------------------------------------------- data
    @staticmethod
    def _load_pairs(cfg: ImageTextConfig, data_root: Path) -> dict[str, PairSet]:
        if cfg.data.source == "emoji":
            styles = [cfg.data.style] + ([cfg.data.unseen_style] if cfg.data.unseen_style else [])
            return {s: load_emoji(data_root, s, limit=cfg.data.limit) for s in styles}
        if cfg.data.source == "captions":
            if not cfg.data.captions_file or not cfg.data.image_root:
                raise ValueError("data.source=captions needs data.captions_file and data.image_root")
            return {"images": load_captions(cfg.data.captions_file, cfg.data.image_root)}
        raise ValueError(f"data.source must be emoji or captions, got {cfg.data.source!r}")

    @staticmethod
    def _style_data(pairs: PairSet, records: list[dict], generated: list[np.ndarray]) -> StyleData:
        index = {k: i for i, k in enumerate(pairs.keys)}
        rows, kept = [], []
        for rec in records:
            if "image_key" in rec:
                if rec["image_key"] in index:
                    rows.append(index[rec["image_key"]])
                    kept.append(rec)
            else:
                rows.append(len(pairs) + rec["image_index"])
                kept.append(rec)
        images = np.concatenate([pairs.images, np.stack(generated)]) if generated else pairs.images
        return StyleData(pairs, images, kept, rows)

    def _init_from(self, path: Path) -> None:
        file = path / "checkpoints" / "last.pt" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"config.init_from: no checkpoint at {file}")
        state = torch.load(file, map_location="cpu", weights_only=True)
        modules = state.get("modules", state)
        for name, module in (("model", self.model), ("objective", self.objective)):
            if name not in modules:
                raise KeyError(f"config.init_from: {file} has no module {name!r}")
            module.load_state_dict(modules[name])

    # ---------------------------------------------------------------- features
    def _cache_file(self, kind: str, extra: Any) -> Path | None:
        root = self.cfg.cache_dir or os.environ.get("CONTRASUITE_CACHE") or Path.home() / ".cache" / "contrasuite"
        key = json.dumps([kind, asdict(self.cfg.model), extra], sort_keys=True, default=str)
        return Path(root) / "image_text" / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"

    @torch.no_grad()
    def _run_trunk(self, fn, inputs: list | np.ndarray) -> Tensor:
        out = []
        for start in range(0, len(inputs), self.cfg.eval_batch_size):
            chunk = inputs[start: start + self.cfg.eval_batch_size]
            if isinstance(chunk, np.ndarray):
                chunk = torch.from_numpy(chunk)
            with self.ctx.autocast():
                out.append(fn(chunk).float().half().cpu())
        return torch.cat(out)

    def _cached_features(self, texts: list[str]) -> Tensor:
        """Trunk features of ``texts`` and of every style's images (set on each :class:`StyleData`)."""
        for style, data in self.styles.items():
            digest = hashlib.sha256(data.images.tobytes()).hexdigest()
            file = self._cache_file("images", [style, digest])
            data.features = self._load_or_compute(file, lambda: self._run_trunk(self.model.image_features, data.images))
        digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
        file = self._cache_file("texts", digest)
        return self._load_or_compute(file, lambda: self._run_trunk(self.model.text_features, texts))

    @staticmethod
    def _load_or_compute(file: Path, compute) -> Tensor:
        if file.is_file():
            return torch.load(file, map_location="cpu", weights_only=True)
        value = compute()
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_suffix(f".tmp{os.getpid()}")
        torch.save(value, tmp)
        tmp.replace(file)
        return value

    # ---------------------------------------------------------------- embedding
    def _images_in(self, style: StyleData, rows: list[int]) -> Tensor:
        if self.frozen:
            return style.features[rows].to(self.ctx.device).float()
        return torch.from_numpy(style.images[rows])

    def _texts_in(self, texts: list[str]) -> Tensor | list[str]:
        if self.frozen:
            return self.text_features[[self.text_row[t] for t in texts]].to(self.ctx.device).float()
        return texts

    def _embed_images(self, x: Tensor) -> Tensor:
        if len(x) == 0:
            return self._empty()
        return self.net.image_head(x) if self.frozen else self.net.encode_image(x)

    def _embed_texts(self, x: Tensor | list[str]) -> Tensor:
        if len(x) == 0:
            return self._empty()
        return self.net.text_head(x) if self.frozen else self.net.encode_text(x)

    def _empty(self) -> Tensor:
        """No rows, but attached to the graph (GradCache back-propagates every chunk's outputs)."""
        anchor = next(p for p in self.model.parameters() if p.requires_grad)
        return torch.zeros(0, self.model.embed_dim, device=self.ctx.device) + 0 * anchor.sum()

    # ---------------------------------------------------------------- training
    def modules(self) -> Mapping[str, nn.Module]:
        return {"model": self.model, "objective": self.objective}

    def optimizers(self) -> Mapping[str, torch.optim.Optimizer]:
        return {"model": self.opt}

    def schedulers(self) -> Mapping[str, Any]:
        return {}

    def batches(self, epoch: int) -> Iterator[dict]:
        """Train pairs in a ``(seed, epoch)`` order, each with its sampled, false-negative-filtered negatives."""
        cfg, style = self.cfg, self.styles[self.train_style]
        rng = random.Random(f"{self.ctx.seed}-{epoch}")
        order = list(self.splits["train"])
        rng.shuffle(order)
        order = order[self.ctx.rank:: self.ctx.world_size]
        by_key: dict[str, list[int]] = {}
        for j, rec in enumerate(style.neg_records):
            by_key.setdefault(rec["key"], []).append(j)
        for start in range(0, len(order), cfg.batch_size):
            rows = order[start: start + cfg.batch_size]
            if len(rows) < 2:  # a contrastive batch needs a negative
                continue
            captions = [style.pairs.captions[r] for r in rows]
            in_batch = {normalise(c) for c in captions}
            neg_texts, neg_images = [], []
            for r in rows:
                key = style.pairs.keys[r]
                if cfg.hard_negatives.texts:
                    pool = self.text_negs.get(key, [])
                    neg_texts += rng.sample(pool, k=min(cfg.hard_negatives.texts_per_pair, len(pool)))
                if cfg.hard_negatives.images:
                    pool = by_key.get(key, [])
                    neg_images += rng.sample(pool, k=min(cfg.hard_negatives.images_per_pair, len(pool)))
            neg_texts = [t for t in dict.fromkeys(neg_texts) if normalise(t) not in in_batch]
            neg_images = [j for j in dict.fromkeys(neg_images) if normalise(style.neg_records[j]["negative"]) not in in_batch]
            yield {"rows": rows, "captions": captions, "neg_texts": neg_texts,
                   "neg_image_rows": [style.neg_rows[j] for j in neg_images]}

    def _loss(self, images: Tensor, texts: Tensor, neg_texts: Tensor, neg_images: Tensor, pos_mask: Tensor) -> Tensor:
        extras = {}
        if len(neg_texts):
            extras["extra_texts"] = neg_texts
        if len(neg_images):
            extras["extra_images"] = neg_images
        return self.objective(images, texts, pos_mask=pos_mask, **extras)

    def train_step(self, batch: dict, step: StepContext) -> Mapping[str, float]:
        style = self.styles[self.train_style]
        captions = batch["captions"]
        pos_mask = torch.tensor([[a == b for b in captions] for a in captions], device=self.ctx.device)
        inputs = (self._images_in(style, batch["rows"]), self._texts_in(captions),
                  self._texts_in(batch["neg_texts"]), self._images_in(style, batch["neg_image_rows"]))

        def embed(chunk):
            return (self._embed_images(chunk[0]), self._embed_texts(chunk[1]), self._embed_texts(chunk[2]),
                    self._embed_images(chunk[3]))

        def loss_fn(images, texts, neg_texts, neg_images):
            return self._loss(images, texts, neg_texts, neg_images, pos_mask)

        n = self.cfg.gradcache_chunks
        if n > 1:
            chunks = list(zip(*(_split(x, n) for x in inputs)))
            loss = step.optimize_cached("model", embed, chunks, loss_fn)
        else:
            with step.autocast():
                reps = embed(inputs)
            loss = loss_fn(*reps)
            step.optimize("model", loss)
        return {"loss": float(loss.detach()), "neg_texts": float(len(batch["neg_texts"])),
                "neg_images": float(len(batch["neg_image_rows"]))}

    # ---------------------------------------------------------------- evaluation
    @torch.no_grad()
    def _embed_all(self, style: StyleData, rows: list[int], texts: list[str]) -> tuple[Tensor, Tensor]:
        bs = self.cfg.eval_batch_size
        imgs, txts = [], []
        with self.ctx.autocast():
            for s in range(0, len(rows), bs):
                imgs.append(self._embed_images(self._images_in(style, rows[s: s + bs])).float())
            for s in range(0, len(texts), bs):
                txts.append(self._embed_texts(self._texts_in(texts[s: s + bs])).float())
        return F.normalize(torch.cat(imgs), dim=-1).cpu(), F.normalize(torch.cat(txts), dim=-1).cpu()

    def evaluate(self, split: str = "val") -> Mapping[str, float]:
        if split not in self.splits:
            raise ValueError(f"split must be one of {list(self.splits)}, got {split!r}")
        rows = self.splits[split]
        out: dict[str, float] = {}
        for name, style in self.styles.items():
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


def _split(x: Tensor | list, n: int) -> list:
    if isinstance(x, list):
        size = -(-len(x) // n) if x else 0
        return [x[i * size: (i + 1) * size] for i in range(n)]
    return list(torch.tensor_split(x, n))
