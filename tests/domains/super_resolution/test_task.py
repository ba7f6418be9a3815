"""The task on tiny networks and crops: gradient flow of the contrastive term, optimizer order, evaluation."""

from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from contrasuite.core.task.optim import Length, OptimConfig, ScheduleConfig
from contrasuite.core.task.protocol import TaskContext
from contrasuite.domains.super_resolution.task import SRConfig, SuperResolutionTask


def tiny_config(**changes) -> SRConfig:
    cfg = SRConfig()
    cfg.data.patch_size, cfg.batch_size, cfg.data.steps_per_epoch = 8, 3, 2
    cfg.data.max_train_images, cfg.data.val_crop = 20, 16
    cfg.model.n_resblocks, cfg.model.n_feats = 2, 8
    cfg.discriminator.channel_divisor = 16
    cfg.test_sets = ["Set5"]
    for k, v in changes.items():
        setattr(cfg, k, v)
    return cfg


def make_task(root: Path, tmp_path: Path, **changes) -> SuperResolutionTask:
    torch.manual_seed(0)
    task = SuperResolutionTask()
    task.setup(TaskContext(config=tiny_config(**changes), device=torch.device("cpu"), precision="fp32",
                           run_dir=tmp_path, data_root=root, seed=0))
    return task


class RecordingStep:
    """A StepContext that backprops and steps like the engine, recording the order and D's grads."""

    def __init__(self, task):
        self.task, self.epoch, self.step, self.calls = task, 0, 0, []

    def autocast(self):
        return nullcontext()

    def optimize(self, name, loss, terms=None):
        loss.backward()
        d_grads = [p.grad for p in self.task.discriminator.parameters()] if "discriminator" in self.task.modules() else []
        self.calls.append((name, any(g is not None and g.abs().sum() > 0 for g in d_grads)))
        self.task.optimizers()[name].step()
        self.task.optimizers()[name].zero_grad(set_to_none=True)


def generator_grad(task, loss_fn):
    task.generator.zero_grad(set_to_none=True)
    loss_fn().backward()
    return torch.cat([p.grad.flatten() for p in task.generator.parameters()])


def test_contrastive_term_changes_the_generator_gradient(sr_data_root, tmp_path):
    task = make_task(sr_data_root, tmp_path)
    lr, hr = next(iter(task.batches(0)))
    pos, neg = task.variants(lr, hr, 0)
    for p in task.discriminator.parameters():
        p.requires_grad_(False)

    def l1():
        return torch.nn.functional.l1_loss(task.generator(lr), hr)

    def l1_plus_cl():
        sr = task.generator(lr)
        return torch.nn.functional.l1_loss(sr, hr) + task.contrastive_loss(sr, pos, neg)

    def official():  # phi(SR) under no_grad, as in PCL-SR's committed Adversarial.forward
        sr = task.generator(lr)
        with torch.no_grad():
            cl = task.contrastive_loss(sr, pos, neg)
        return torch.nn.functional.l1_loss(sr, hr) + cl

    g_l1, g_ours, g_official = generator_grad(task, l1), generator_grad(task, l1_plus_cl), generator_grad(task, official)
    assert (g_ours - g_l1).norm() > 1e-4 * g_l1.norm()
    torch.testing.assert_close(g_official, g_l1)  # the official path sends nothing to the generator
    sr = task.generator(lr).detach().requires_grad_(True)
    (d_sr,) = torch.autograd.grad(task.contrastive_loss(sr, pos, neg), sr)
    assert d_sr.abs().sum() > 0


def test_train_step_order_and_frozen_discriminator(sr_data_root, tmp_path):
    task = make_task(sr_data_root, tmp_path)
    step = RecordingStep(task)
    out = task.train_step(next(iter(task.batches(0))), step)
    # D steps first; the generator's loss leaves no gradient on D.
    assert step.calls == [("discriminator", True), ("generator", False)]
    assert all(p.requires_grad for p in task.discriminator.parameters())
    assert set(out) == {"loss", "l1", "contrastive", "loss_d"} and all(torch.isfinite(torch.tensor(v)) for v in out.values())


def test_l1_only_has_one_optimizer_and_batches_are_seeded(sr_data_root, tmp_path):
    task = make_task(sr_data_root, tmp_path, contrastive=False)
    assert list(task.optimizers()) == ["generator"] and task.embed_for_health(next(iter(task.batches(0)))) is None
    a, b = list(task.batches(1)), list(task.batches(1))
    assert len(a) == 2 and a[0][1].shape == (3, 3, 16, 16) and a[0][0].shape == (3, 3, 8, 8)
    torch.testing.assert_close(a[0][0], b[0][0])
    assert not torch.equal(a[0][0], list(task.batches(2))[0][0])
    step = RecordingStep(task)
    task.train_step(a[0], step)
    assert [c[0] for c in step.calls] == ["generator"]


def test_evaluate_val_and_test(sr_data_root, tmp_path):
    task = make_task(sr_data_root, tmp_path)
    val = task.evaluate("val")
    assert list(val) == ["psnr_y", "ssim_y"] and 5 < val["psnr_y"] < 60
    test = task.evaluate("test")
    assert set(test) == {"Set5/psnr_y", "Set5/ssim_y"}
    with pytest.raises(ValueError, match="split"):
        task.evaluate("train")


def first_batch(task):
    """``(lr, hr, positives, negatives)`` of the task's first batch."""
    lr, hr = next(iter(task.batches(0)))
    return (lr, hr, *task.variants(lr, hr, 0))


def test_official_mode_sends_no_contrastive_gradient_to_the_generator(sr_data_root, tmp_path):
    grads = {}
    for mode in ("gradient", "official"):
        task = make_task(sr_data_root, tmp_path, contrastive_gradient=mode)
        lr, hr, pos, neg = first_batch(task)

        def loss():
            sr = task.generator(lr)
            return torch.nn.functional.l1_loss(sr, hr) + task.contrastive_loss(sr, pos, neg)

        grads[mode] = generator_grad(task, loss)
        grads["l1"] = generator_grad(task, lambda: torch.nn.functional.l1_loss(task.generator(lr), hr))
    torch.testing.assert_close(grads["official"], grads["l1"])
    assert (grads["gradient"] - grads["l1"]).norm() > 1e-4 * grads["l1"].norm()


def test_per_group_passes_use_each_groups_batchnorm_statistics(sr_data_root, tmp_path):
    losses = {}
    for passes in ("joint", "per_group"):
        task = make_task(sr_data_root, tmp_path, embed_passes=passes)
        lr, _, pos, neg = first_batch(task)
        losses[passes] = float(task.contrastive_loss(task.generator(lr), pos, neg))
        task.discriminator.eval()  # running statistics: the grouping no longer matters
        losses[passes + "_eval"] = float(task.contrastive_loss(task.generator(lr), pos, neg))
    assert losses["joint"] != pytest.approx(losses["per_group"], rel=1e-6)
    assert losses["joint_eval"] == pytest.approx(losses["per_group_eval"], rel=1e-5)


def test_init_from_loads_the_generator_and_cosine_decays(sr_data_root, tmp_path):
    source = make_task(sr_data_root, tmp_path)
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    torch.save({"modules": {"generator": source.generator.state_dict()}}, tmp_path / "run" / "checkpoints" / "last.pt")
    torch.manual_seed(1)  # a different initialisation, overwritten by init_from
    cosine = OptimConfig(name="adam", lr=1e-4, schedule=ScheduleConfig("cosine", end=Length(steps=4), min_lr=1e-6))
    task = SuperResolutionTask()
    task.setup(TaskContext(config=tiny_config(init_from=str(tmp_path / "run"), optim=cosine),
                           device=torch.device("cpu"), precision="fp32", run_dir=tmp_path, data_root=sr_data_root, seed=0))
    for a, b in zip(task.generator.state_dict().values(), source.generator.state_dict().values()):
        torch.testing.assert_close(a, b)
    opt, sched = task.optimizers()["generator"], task.schedulers()["generator"]
    for _ in range(4):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-6)


def test_init_from_errors_name_the_key_and_file(sr_data_root, tmp_path):
    from contrasuite.core.task.errors import DataError

    with pytest.raises(DataError, match="config.init_from: no checkpoint at .*missing"):
        make_task(sr_data_root, tmp_path, init_from=str(tmp_path / "missing"))
    torch.save({"modules": {"model": {}}}, tmp_path / "other.pt")
    with pytest.raises(DataError, match="has no module 'generator'"):
        make_task(sr_data_root, tmp_path, init_from=str(tmp_path / "other.pt"))
