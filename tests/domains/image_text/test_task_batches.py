"""Training batches: one image/text block whose pos_mask marks every true match, in both directions."""

import contextlib
from pathlib import Path

import pytest
import torch

from contrasuite.domains.image_text.captions import normalise
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "image_text"


@pytest.fixture(scope="module")
def task(tmp_path_factory, emoji_root):
    tmp = tmp_path_factory.mktemp("batches")
    overrides = [f"run.output_root={tmp}", "config.data.limit=30", "config.data.unseen_style=null",
                 "config.data.val_fraction=0", "config.data.test_fraction=0", "config.batch_size=1000",
                 "config.model.pretrained_trunks=false", "config.model.image_size=64", "run.precision=fp32",
                 f"config.cache_dir={tmp / 'cache'}", "config.hard_negatives.texts_per_pair=50",
                 "config.hard_negatives.images_per_pair=50"]
    return Trainer(load_config(CONFIGS / "reduced_text_image_negatives.yaml", overrides, data_root=str(emoji_root))).task


def one_batch(task, **hard):
    """The first batch with plain hard negatives (no image pairs, weight 1, no focus term) changed by ``hard``:
    set in full for every call, so a test sees the same settings whichever tests ran before it."""
    for key, value in {"image_pairs": False, "weight": 1.0, "focus_weight": 0.0, **hard}.items():
        setattr(task.cfg.hard_negatives, key, value)
    return next(iter(task.batches(0)))


def test_block_marks_true_matches(task):
    style = task.styles[task.train_style]
    batch = one_batch(task)
    n, texts = len(batch["rows"]), [normalise(t) for t in batch["texts"]]
    pos = batch["pos_mask"]
    assert pos.shape == (len(batch["image_rows"]), len(texts)) and batch["neg_images"] > 0 and batch["neg_texts"] > 0
    for i, row in enumerate(batch["rows"]):  # each pair: positive on its caption only
        assert {texts[t] for t in pos[i].nonzero().flatten().tolist()} == {normalise(style.pairs.captions[row])}
    # NegCLIP-style: a text negative is a column without a positive pair image, a negative image a row whose
    # positives are only the texts it truly depicts (a skin-tone sibling's caption, the same negative caption)
    captions = len({normalise(c) for c in batch["captions"]})
    assert texts[:captions] == list(dict.fromkeys(normalise(c) for c in batch["captions"]))
    assert not pos[:n, captions:].any()
    for i, row in enumerate(batch["image_rows"][n:], start=n):
        j = style.neg_rows.index(row)
        assert {texts[t] for t in pos[i].nonzero().flatten().tolist()} == style.neg_truths[j] & set(texts)
    assert pos[n:].any()  # the recoloured "mahjong tile red dragon" is the text negative "... green dragon"


def test_image_pairs_and_hard_negative_weight(task):
    style = task.styles[task.train_style]
    batch = one_batch(task, image_pairs=True, weight=3.0)
    n, texts = len(batch["rows"]), [normalise(t) for t in batch["texts"]]
    pos, weight = batch["pos_mask"], batch["neg_weight"]
    for i in range(n, len(batch["image_rows"])):  # every negative image is now a pair with its true caption
        j = style.neg_rows.index(batch["image_rows"][i])
        assert normalise(style.neg_records[j]["negative"]) in {texts[t] for t in pos[i].nonzero().flatten().tolist()}
    assert set(weight.unique().tolist()) == {1.0, 3.0} and not (weight[pos] != 1.0).any()
    for i, row in enumerate(batch["rows"]):  # a pair's own text negatives weigh 3, other texts 1
        negatives = {normalise(t) for t in task.text_negs.get(style.pairs.keys[row], [])}
        for t, text in enumerate(texts):
            if not pos[i, t]:
                assert weight[i, t] == (3.0 if text in negatives else 1.0)
    step_loss = task.objective(torch.randn(len(batch["image_rows"]), 8), torch.randn(len(texts), 8),
                               pos_mask=pos, neg_weight=weight)
    assert torch.isfinite(step_loss)


def test_focus_term_keeps_only_each_rows_own_hard_negatives(task):
    style = task.styles[task.train_style]
    batch = one_batch(task, focus_weight=1.0)
    n, texts = len(batch["rows"]), [normalise(t) for t in batch["texts"]]
    pos, focus = batch["pos_mask"], batch["focus_weight"]
    assert "neg_weight" not in batch and set(focus.unique().tolist()) == {0.0, 1.0} and bool(focus[pos].all())
    for i, row in enumerate(batch["rows"]):  # a pair: its caption and its own text negatives
        own = {normalise(t) for t in task.text_negs.get(style.pairs.keys[row], [])}
        own.add(normalise(style.pairs.captions[row]))
        assert {texts[t] for t in focus[i].nonzero().flatten().tolist()} == own & set(texts)
    for i in range(n, len(batch["image_rows"])):  # a negative image: against the caption it was edited from
        j = style.neg_rows.index(batch["image_rows"][i])
        source = normalise(style.pairs.captions[style.pairs.keys.index(style.neg_records[j]["key"])])
        assert focus[i, texts.index(source)] == 1.0
    loss = task.objective(torch.randn(len(batch["image_rows"]), 8), torch.randn(len(texts), 8), pos_mask=pos,
                          neg_weight=focus)
    assert torch.isfinite(loss)


def test_held_out_captions_never_enter_training(tmp_path, emoji_root):
    """'squared cool' (train) has the text negative 'squared sos', a held-out caption: it must not be used."""
    overrides = [f"run.output_root={tmp_path}", "config.data.limit=100", "config.data.unseen_style=null",
                 "config.model.pretrained_trunks=false", "config.model.image_size=64", "run.precision=fp32",
                 f"config.cache_dir={tmp_path / 'cache'}", "config.hard_negatives.texts_per_pair=50",
                 "config.hard_negatives.images_per_pair=50"]
    task = Trainer(load_config(CONFIGS / "reduced_text_image_negatives.yaml", overrides, data_root=str(emoji_root))).task
    style = task.styles[task.train_style]
    train = {style.pairs.keys[r] for r in task.splits["train"]}
    generated = [r for r in task.text_records if r["key"] in train and normalise(r["negative"]) in task.held_out]
    assert generated  # the generator does propose held-out captions as negatives of training emoji
    for batch in task.batches(0):
        assert not {normalise(t) for t in batch["texts"]} & task.held_out
        for row in batch["image_rows"][len(batch["rows"]):]:
            assert not style.neg_truths[style.neg_rows.index(row)] & task.held_out


def test_feature_caches_are_keyed_by_their_own_tower(tmp_path):
    """Changing a text setting re-runs only the text trunk (and an image setting only the image trunk)."""
    from contrasuite.domains.image_text.features import cache_file
    from contrasuite.domains.image_text.models import ModelConfig

    def files(**model):
        settings = ModelConfig(**model)
        return cache_file(settings, str(tmp_path), "images", ["twitter", "d"]), cache_file(settings, str(tmp_path), "texts", "d")

    images, texts = files()
    seg_images, seg_texts = files(text_segments=4)
    grid_images, grid_texts = files(grid=4)
    top_images, top_texts = files(train_image_stages=1)
    assert seg_images == images and seg_texts != texts
    assert grid_images != images and grid_texts == texts
    assert top_images != images and top_texts == texts


def test_trained_image_stages_get_their_own_learning_rate(tmp_path, emoji_root):
    overrides = [f"run.output_root={tmp_path}", "config.data.limit=20", "config.data.unseen_style=null",
                 "config.model.pretrained_trunks=false", "config.model.image_size=64", "run.precision=fp32",
                 f"config.cache_dir={tmp_path / 'cache'}", "config.model.train_image_stages=1",
                 "config.model.extra_image_stages=[]",  # the reduced configs pool extra stages; not with this
                 "config.optim.lr=0.01", "config.optim.groups={trunk: {lr_scale: 0.5}}"]
    task = Trainer(load_config(CONFIGS / "reduced_pairs.yaml", overrides, data_root=str(emoji_root))).task
    heads, top = task.optimizers()["model"].param_groups
    top_ids = {id(p) for p in task.model.image_head.top.parameters()}
    assert top["lr"] == 0.005 and heads["lr"] == 0.01 and {id(p) for p in top["params"]} == top_ids
    assert not top_ids & {id(p) for p in heads["params"]}
    assert task.styles[task.train_style].features.shape[1:] == (192, 2, 2)  # cached before the last stage
    before = [p.detach().clone() for p in task.model.image_head.top.parameters()]
    step = next(iter(task.batches(0)))
    with torch.no_grad():
        images = task._images_in(task.styles[task.train_style], step["image_rows"])
    loss = task.objective(task._embed_images(images), task._embed_texts(task._texts_in(step["texts"])),
                          pos_mask=step["pos_mask"])
    loss.backward()
    task.optimizers()["model"].step()
    assert all(not torch.equal(a, b) for a, b in zip(task.model.image_head.top.parameters(), before))


class _Step:
    """The engine's step, reduced to what ``train_step`` calls."""

    def __init__(self, optimizers):
        self.optimizers = optimizers

    def autocast(self):
        return contextlib.nullcontext()

    def optimize(self, name, loss, terms=None):
        loss.backward()
        self.optimizers[name].step()
        self.optimizers[name].zero_grad(set_to_none=True)


def test_weight_average_follows_training_and_is_what_evaluation_uses(tmp_path, emoji_root):
    overrides = [f"run.output_root={tmp_path}", "config.data.limit=20", "config.data.unseen_style=null",
                 "config.data.val_fraction=0.3", "config.model.pretrained_trunks=false", "config.model.image_size=64",
                 "run.precision=fp32", f"config.cache_dir={tmp_path / 'cache'}", "config.ema=0.5"]
    task = Trainer(load_config(CONFIGS / "reduced_pairs.yaml", overrides, data_root=str(emoji_root))).task
    assert "model_ema" in task.modules()
    start = [p.detach().clone() for p in task.model.parameters()]
    task.train_step(next(iter(task.batches(0))), _Step(task.optimizers()))
    for avg, s, p in zip(task.model_ema.parameters(), start, task.model.parameters()):
        torch.testing.assert_close(avg, 0.5 * s + 0.5 * p.detach())
    style = task.styles[task.train_style]
    rows = task.splits["val"][:4]
    captions = [style.pairs.captions[r] for r in rows]
    averaged = task._embed_all(style, rows, captions)
    task.model_ema.load_state_dict(task.model.state_dict())
    assert not torch.allclose(averaged[0], task._embed_all(style, rows, captions)[0])
