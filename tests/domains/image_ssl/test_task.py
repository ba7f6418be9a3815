"""ImageSSLTask without the engine: batches, the two loss forms, negatives, BN-eval features, errors."""

import math
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from contrasuite.core.objectives import InfoNCE
from contrasuite.core.pairs import two_view
from contrasuite.core.task.protocol import TaskContext
from contrasuite.domains.image_ssl.task import (
    DataConfig, EvalConfig, ImageSSLConfig, ImageSSLTask, ModelConfig, ObjectiveConfig, _EpochBatches,
)
from contrasuite.pipelines.config import load_config


class Step:
    epoch = 0
    step = 0

    def __init__(self, task):
        self.task = task

    def autocast(self):
        return nullcontext()

    def optimize(self, name, loss, terms=None):
        opt = self.task.optimizers()[name]
        loss.backward()
        opt.step()
        opt.zero_grad()
        self.task.schedulers()[name].step()


def make_task(data_root: Path, **overrides) -> ImageSSLTask:
    settings = dict(
        batch_size=8, data=DataConfig(val_fraction=0.25),
        model=ModelConfig(encoder="small_conv", width=4, proj_hidden=16, proj_dim=8),
        eval=EvalConfig(linear_epochs=2, knn_k=5),
    )
    cfg = ImageSSLConfig(**{**settings, **overrides})
    task = ImageSSLTask()
    task.setup(TaskContext(config=cfg, device=torch.device("cpu"), precision="fp32", run_dir=data_root,
                           data_root=data_root, seed=3))
    return task


def test_epoch_batches_are_seeded_disjoint_over_ranks_and_drop_last():
    ranks = [_EpochBatches(n=50, global_batch=16, rank=r, world=2, seed=0, epoch=1) for r in range(2)]
    assert len(ranks[0]) == 3
    idx = [torch.cat([b.indices[b.part] for b in r]) for r in ranks]
    assert len(set(idx[0].tolist()) & set(idx[1].tolist())) == 0 and all(len(i) == 24 for i in idx)
    one = list(_EpochBatches(n=50, global_batch=16, rank=0, world=1, seed=0, epoch=1))
    for b, b0, b1 in zip(one, *ranks):  # the ranks' parts, in rank order, are the one-process batch, same views seed
        assert torch.equal(torch.cat([b0.indices[b0.part], b1.indices[b1.part]]), b.indices) and b.seed == b0.seed == b1.seed
    again = [b.indices for b in _EpochBatches(50, 16, 0, 2, 0, 1)]
    assert all(torch.equal(a, b.indices) for a, b in zip(again, ranks[0]))
    other = torch.cat([b.indices for b in _EpochBatches(50, 16, 0, 2, 0, 2)])
    assert not torch.equal(other, torch.cat([b.indices for b in ranks[0]]))


def test_two_view_loss_is_nt_xent(tiny_cifar):
    task = make_task(tiny_cifar)
    z = F.normalize(torch.randn(12, 8), dim=1)
    anchors, labels = two_view(z[:6], z[6:])
    assert torch.allclose(task.loss(z[:6], z[6:]), InfoNCE(temperature=0.5)(anchors, labels=labels))


def test_paired_symmetric_loss_averages_both_directions(tiny_cifar):
    task = make_task(tiny_cifar, objective=ObjectiveConfig(views="paired", symmetric=True))
    z1, z2 = F.normalize(torch.randn(2, 6, 8), dim=2)
    loss = InfoNCE(temperature=0.5)
    assert torch.allclose(task.loss(z1, z2), 0.5 * (loss(z1, z2) + loss(z2, z1)))


def test_training_steps_change_weights_and_report_finite_loss(tiny_cifar):
    task = make_task(tiny_cifar)
    before = [p.detach().clone() for p in task.model.parameters()]
    for batch in task.batches(0):
        out = task.train_step(batch, Step(task))
        assert torch.isfinite(torch.tensor(out["loss"]))
    assert any(not torch.equal(a, b) for a, b in zip(before, task.model.parameters()))


def test_features_use_batchnorm_running_stats_and_keep_train_mode(tiny_cifar):
    task = make_task(tiny_cifar)
    task.model.train()
    bn = next(m for m in task.model.encoder.modules() if isinstance(m, torch.nn.BatchNorm2d))
    bn.running_mean.fill_(0.3)
    feats = task.features(task.test_images)
    assert task.model.training and torch.allclose(bn.running_mean, torch.full_like(bn.running_mean, 0.3))
    task.model.eval()
    with torch.no_grad():
        expected = task.model.encoder(task.normalize(task.test_images))
    assert torch.allclose(feats, expected, atol=1e-5)


def test_evaluate_val_and_test_keys(tiny_cifar):
    task = make_task(tiny_cifar)
    assert set(task.evaluate("val")) == {"knn_acc"}
    test = task.evaluate("test")
    assert {"knn_acc", "linear_acc", "linear_val_acc"} <= set(test)
    assert all(0 <= test[k] <= 100 for k in ("knn_acc", "linear_acc"))
    with pytest.raises(ValueError, match="split"):
        task.evaluate("train")


def test_paired_objective_with_two_view_equals_the_symmetric_paired_form(tiny_cifar):
    z1, z2 = F.normalize(torch.randn(2, 6, 8), dim=2)
    losses = [make_task(tiny_cifar, objective=ObjectiveConfig(terms=[{"name": "dhel"}], views=views)).loss(z1, z2)
              for views in ("two_view", "paired")]
    torch.testing.assert_close(losses[0], losses[1])


def test_negatives_need_paired_views(tiny_cifar):
    with pytest.raises(ValueError, match="objective.views=paired"):
        make_task(tiny_cifar, negatives={"name": "queue", "size": 16})


def test_batch_larger_than_subset_names_the_keys(tiny_cifar):
    with pytest.raises(ValueError, match="batch_size"):
        make_task(tiny_cifar, batch_size=64)












def test_the_optimizer_of_a_shipped_config_follows_its_optim_section(tiny_cifar):
    """reduced_siglip on tiny data: SGD with the config's lr, momentum and weight decay on the model, none on
    SigLIP's learned scale and bias; linear warm-up over the warm-up epochs, then a cosine to 0 at run.epochs."""
    loaded = load_config("image_ssl/reduced_siglip", ["run.epochs=4"])
    cfg = loaded.config
    task = make_task(tiny_cifar, optim=cfg.optim, objective=cfg.objective)
    opt, o = task.optimizers()["model"], cfg.optim
    model, learned = opt.param_groups
    assert isinstance(opt, torch.optim.SGD) and model["params"] == list(task.model.parameters())
    assert (model["initial_lr"], model["momentum"], model["weight_decay"]) == (o.lr, o.momentum, o.weight_decay)
    assert learned["params"] == list(task.objective.parameters()) and learned["weight_decay"] == 0.0
    steps = len(task.batches(0))
    warmup, end = round(o.warmup.epochs * steps), loaded.run.epochs * steps
    assert 0 < warmup < end
    for s in range(end + 2):
        want = o.lr * ((s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * min(1, (s - warmup) / (end - warmup)))))
        assert model["lr"] == pytest.approx(want, rel=1e-12, abs=1e-15) and learned["lr"] == model["lr"]
        task.schedulers()["model"].step()



class GradientOnly(Step):
    """Accumulates gradients without stepping, plainly or through GradCache."""

    def optimize(self, name, loss, terms=None):
        loss.backward()

    def optimize_cached(self, name, embed, chunks, loss_fn, terms=None):
        from contrasuite.core.gradcache import cached_backward

        return cached_backward(embed, chunks, loss_fn)


def test_gradcache_step_gives_the_full_batch_gradient(tiny_cifar):
    # BatchNorm normalises per chunk under GradCache; eval-mode BN makes the two comparable exactly.
    plain, cached = make_task(tiny_cifar), make_task(tiny_cifar, gradcache_chunk=3)
    cached.model.load_state_dict(plain.model.state_dict())
    batch = next(iter(plain.batches(0)))
    grads = []
    for task in (plain, cached):
        task.model.eval()
        task.train_step(batch, GradientOnly(task))
        grads.append(torch.cat([p.grad.flatten() for p in task.model.parameters()]))
    assert grads[0].abs().sum() > 0
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)
