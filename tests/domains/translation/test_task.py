"""Emoji splits, the optimizer order of a CUT step, and the head's update through the engine's step."""

import json
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.core.task.protocol import Progress, TaskContext, no_progress
from contrasuite.domains.averaging import update_average
from contrasuite.domains.translation.data import DataConfig, emoji_groups, split_emoji, to_float
from contrasuite.domains.translation.task import GRID_HEADER, TranslationConfig, TranslationTask


def test_split_emoji_disjoint_and_groups_kept_together():
    groups = [[f"{i}.png"] + [f"{i}-{t}.png" for t in range(i % 3)] for i in range(60)]
    s = split_emoji(groups, test_images=10, val_images=8, seed=0)
    sets = [set(s.train_a), set(s.train_b), set(s.val), set(s.test)]
    assert sum(map(len, sets)) == sum(map(len, groups))
    assert all(not (a & b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    for g in groups:
        assert sum(any(n in part for n in g) for part in sets) == 1  # a group never straddles splits
    assert split_emoji(groups, 10, 8, seed=0) == s and split_emoji(groups, 10, 8, seed=1) != s


@pytest.mark.slow
def test_real_emoji_splits_disjoint(data_root):
    meta = json.loads((data_root / "emoji" / "emoji.json").read_text())
    names = [e["image"] for e in meta if e.get("has_img_twitter") and e.get("has_img_google")]
    groups = emoji_groups(data_root / "emoji" / "emoji.json", names)
    s = split_emoji(groups, 400, 150, seed=0)
    assert len(s.test) >= 400 and len(s.val) >= 150 and min(len(s.train_a), len(s.train_b)) > 500
    assert not (set(s.train_a) & set(s.train_b)) and not ((set(s.train_a) | set(s.train_b)) & (set(s.val) | set(s.test)))
    assert not set(s.val) & set(s.test)


class RecordingStep:
    """A stand-in for the engine's Step: backward, step, zero_grad, and the order of the calls."""

    epoch, step = 0, 0

    def __init__(self, optimizers):
        self.optimizers, self.calls = optimizers, []

    def autocast(self):
        return nullcontext()

    def optimize(self, name, loss, terms=None):
        self.calls.append(name)
        loss.backward()
        self.optimizers[name].step()
        self.optimizers[name].zero_grad(set_to_none=True)


def tiny_task(tmp_path: Path, data_root: Path, cache: Path, ema: float = 0.0, progress: Progress = no_progress,
              **nce) -> TranslationTask:
    cfg = TranslationConfig(ema=ema, batch_size=2)
    cfg.data = DataConfig(crop_size=32, max_train_images=6, test_images=20, val_images=10,
                          cache_dir=str(cache))
    cfg.generator.ngf, cfg.generator.n_blocks = 4, 2
    cfg.discriminator.ndf = 4
    cfg.nce.num_patches = 16
    for k, v in nce.items():
        setattr(cfg.nce, k, v)
    task = TranslationTask()
    task.setup(TaskContext(config=cfg, device=torch.device("cpu"), precision="fp32", run_dir=tmp_path,
                           data_root=data_root, seed=0, progress=progress))
    return task


def test_step_order_and_every_optimizer_moves(tmp_path, data_root, emoji_cache):
    task = tiny_task(tmp_path, data_root, emoji_cache)
    assert list(task.optimizers()) == ["discriminator", "generator", "head"]
    before = {k: [p.detach().clone() for p in m.parameters()] for k, m in task.modules().items()}
    step = RecordingStep(task.optimizers())
    out = task.train_step(next(iter(task.batches(0))), step)
    assert step.calls == ["discriminator", "generator", "head"]
    assert {"loss_d", "loss_gan", "nce_x", "nce_y", "loss"} <= set(out)
    for name in ("generator", "discriminator", "head"):
        after = list(task.modules()[name].parameters())
        assert any(not torch.equal(a, b) for a, b in zip(after, before[name])), name
    # D is unfrozen again and no stale gradients are left behind for the next step
    assert all(p.requires_grad and p.grad is None for m in task.modules().values() for p in m.parameters())


def test_keys_from_the_translations_own_pass_give_the_loss_and_gradients_of_recomputed_keys(tmp_path, data_root, emoji_cache):
    """The step takes PatchNCE's keys from G's forward (CUT encodes the input again): same loss and gradients."""
    task = tiny_task(tmp_path, data_root, emoji_cache)
    real_a = to_float(next(iter(task.batches(0)))[0])
    grads = []
    for from_forward in (False, True):
        task.generator.zero_grad(set_to_none=True)
        task.head.zero_grad(set_to_none=True)
        fake, feats = task.generator.forward_and_encode(real_a, task.layers)
        src = [f.detach() for f in feats] if from_forward else real_a
        loss = task.nce_loss(src, fake, False, torch.Generator().manual_seed(3))
        loss.backward()
        grads.append([loss.detach()] + [p.grad.clone() for m in (task.generator, task.head) for p in m.parameters()])
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(*grads))
    assert grads[0][0] > 0 and any(g.abs().sum() > 0 for g in grads[0][1:])


def test_gan_only_and_fastcut_variants(tmp_path, data_root, emoji_cache):
    gan = tiny_task(tmp_path / "gan", data_root, emoji_cache, weight=0.0)
    assert list(gan.optimizers()) == ["discriminator", "generator"]
    step = RecordingStep(gan.optimizers())
    assert "nce_x" not in gan.train_step(next(iter(gan.batches(0))), step)
    fast = tiny_task(tmp_path / "fast", data_root, emoji_cache, weight=10.0, identity=False, flip_equivariance=True)
    out = fast.train_step(next(iter(fast.batches(0))), RecordingStep(fast.optimizers()))
    assert "nce_x" in out and "nce_y" not in out


def test_batches_reproducible_per_seed_and_epoch(tmp_path, data_root, emoji_cache):
    task = tiny_task(tmp_path, data_root, emoji_cache)
    a = [torch.cat(b) for b in task.batches(1)]
    b = [torch.cat(b) for b in task.batches(1)]
    c = [torch.cat(b) for b in task.batches(2)]
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and not all(torch.equal(x, y) for x, y in zip(a, c))


def test_update_average_is_the_exponential_moving_average():
    model, average = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    old = [p.detach().clone() for p in average.parameters()]
    update_average(average, model, 0.9)
    for a, o, m in zip(average.parameters(), old, model.parameters()):
        torch.testing.assert_close(a, 0.9 * o + 0.1 * m)


def test_generator_average_follows_training_and_is_what_evaluation_uses(tmp_path, data_root, emoji_cache):
    task = tiny_task(tmp_path, data_root, emoji_cache, ema=0.5)
    assert "generator_ema" in task.modules()
    start = [p.detach().clone() for p in task.generator.parameters()]
    task.train_step(next(iter(task.batches(0))), RecordingStep(task.optimizers()))
    for avg, s, g in zip(task.generator_ema.parameters(), start, task.generator.parameters()):
        torch.testing.assert_close(avg, 0.5 * s + 0.5 * g.detach())  # one step from the same start
    assert not any(p.requires_grad for p in task.generator_ema.parameters())
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    ema_out = task.translate(x)
    task.generator_ema.load_state_dict(task.generator.state_dict())
    assert not torch.equal(ema_out, task.translate(x))  # translate used the average, not the generator
    with pytest.raises(ValueError, match="config.ema"):
        tiny_task(tmp_path / "bad", data_root, emoji_cache, ema=1.0)


def test_pixel_identity_loss_is_the_mean_absolute_difference_on_targets(tmp_path, data_root, emoji_cache):
    task = tiny_task(tmp_path, data_root, emoji_cache, weight=0.0)  # the GAN alone: no G(y) without the option
    task.cfg.lambda_identity = 2.0
    a, b = next(iter(task.batches(0)))
    seen = []
    task.generator.register_forward_hook(lambda module, inputs, output: seen.append((inputs[0].detach(), output.detach())))
    out = task.train_step((a, b), RecordingStep(task.optimizers()))
    inputs, fake = seen[0]
    n = a.shape[0]
    assert inputs.shape[0] == 2 * n  # G ran on [x; y]
    expected = (fake[n:] - inputs[n:]).abs().mean()
    assert out["identity_l1"] == pytest.approx(float(expected), rel=1e-5)
    assert out["loss"] == pytest.approx(out["loss_gan"] + 2.0 * out["identity_l1"], rel=1e-5)


def test_discriminator_sees_augmented_images_in_both_steps(tmp_path, data_root, emoji_cache):
    task = tiny_task(tmp_path, data_root, emoji_cache)
    task.cfg.discriminator.augment = ["translation", "cutout"]
    task.setup(task.ctx)  # rebuild with the policies
    a, b = next(iter(task.batches(0)))
    seen = []
    task.discriminator.register_forward_hook(lambda module, inputs, output: seen.append(inputs[0].detach()))
    task.train_step((a, b), RecordingStep(task.optimizers()))
    assert len(seen) == 3  # D(G(x)) and D(y) in its step, D(G(x)) in the generator's
    grey = [float((x.abs() < 1e-6).all(dim=1).float().mean()) for x in seen]
    assert all(g >= 0.2 for g in grey)  # cutout: a quarter of every image the discriminator saw is grey
    real = (b.float() / 127.5 - 1.0)
    assert not torch.allclose(seen[1], real)


def test_paired_diagnostic_compares_the_translation_with_the_true_target_drawing(tmp_path, data_root, emoji_cache):
    task = tiny_task(tmp_path, data_root, emoji_cache, weight=0.0)
    task.cfg.lambda_paired = 3.0
    task.setup(task.ctx)  # reload the data with the source emoji's target drawings
    a, b, target = next(iter(task.batches(0)))
    size = a.shape[-1]

    def crops(image):  # every crop of the batch's size, flipped or not
        h, w = image.shape[-2:]
        for y in range(h - size + 1):
            for x in range(w - size + 1):
                crop = image[:, y : y + size, x : x + size]
                yield (y, x, False), crop
                yield (y, x, True), crop.flip(-1)

    for x_crop, y_crop in zip(a, target):  # y_x: the same crop and flip of the same emoji's target drawing
        found = [(k, where) for k in range(len(task.train_a)) for where, c in crops(task.train_a[k]) if torch.equal(c, x_crop)]
        assert any(torch.equal(dict(crops(task.train_a_target[k]))[where], y_crop) for k, where in found)
        assert not torch.equal(x_crop, y_crop)
    seen = []
    task.generator.register_forward_hook(lambda module, inputs, output: seen.append(output.detach()))
    out = task.train_step((a, b, target), RecordingStep(task.optimizers()))
    expected = (seen[0] - (target.float() / 127.5 - 1.0)).abs().mean()
    assert out["paired_l1"] == pytest.approx(float(expected), rel=1e-5)
    assert out["loss"] == pytest.approx(out["loss_gan"] + 3.0 * out["paired_l1"], rel=1e-5)


def test_paired_diagnostic_needs_emoji_data(tmp_path, data_root):
    folders = tmp_path / "pairs"
    for name in ("trainA", "trainB"):
        (folders / name).mkdir(parents=True)
    cfg = TranslationConfig(lambda_paired=1.0)
    cfg.data = DataConfig(kind="folders", path=str(folders))
    with pytest.raises(ValueError, match="config.lambda_paired"):
        TranslationTask().setup(TaskContext(config=cfg, device=torch.device("cpu"), precision="fp32", run_dir=tmp_path,
                                            data_root=data_root, seed=0))


def test_evaluation_shows_each_stage_and_writes_a_grid_with_column_names(tmp_path, data_root, emoji_cache):
    stages = []

    def progress(iterable, desc="", total=None):
        stages.append((desc, total))
        return iterable

    task = tiny_task(tmp_path, data_root, emoji_cache, progress=progress)
    task.cfg.eval.max_images, task.cfg.eval.feature_size, task.cfg.eval.kid_subsets, task.cfg.eval.grid_rows = 4, 32, 2, 3
    task.evaluate("val")
    assert stages == [("translating 4 val images", 1), ("EfficientNet-Lite0 features of 4 val target images", 1),
                      ("EfficientNet-Lite0 features of 4 val input images", 1),
                      ("PSNR, SSIM, FD and KID of 4 val input images", 1),
                      ("EfficientNet-Lite0 features of 4 translated images", 1),
                      ("PSNR, SSIM, FD and KID of 4 translated images", 1)]
    saved = np.asarray(Image.open(next((tmp_path / "samples").glob("val_step*.png"))).convert("RGB"))
    inputs, _ = task._eval_images("val")
    side = inputs.shape[-1]
    assert saved.shape[:2] == (GRID_HEADER + 3 * (side + 2) - 2, 3 * (side + 2) - 2)  # 3 rows, 3 columns, the header
    assert np.array_equal(saved[GRID_HEADER : GRID_HEADER + side, :side], inputs[0].permute(1, 2, 0).numpy())
    header = saved[:GRID_HEADER]
    for column in range(3):  # input, output, target: dark text over each column
        assert (header[:, column * (side + 2) : (column + 1) * (side + 2) - 2] < 100).any(), column
