"""Two-view augmentation (shapes, seeded determinism) and encoder / head output shapes."""

import pytest
import torch

from contrasuite.core.task.seeding import derived_seed as batch_seed
from contrasuite.domains.image_ssl.augment import AugmentConfig, Normalize, TwoViewAugment
from contrasuite.domains.image_ssl.encoders import ProjectionHead, SSLModel, build_encoder


def images(n=6, seed=0):
    return torch.randint(0, 256, (n, 32, 32, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def test_two_views_have_the_input_shape_and_differ():
    aug = TwoViewAugment(AugmentConfig())
    v1, v2 = aug(images(), seed=1)
    assert v1.shape == v2.shape == (6, 3, 32, 32) and v1.dtype == torch.float32
    assert not torch.allclose(v1, v2)


def test_same_seed_same_views_whatever_the_global_rng():
    aug = TwoViewAugment(AugmentConfig())
    x = images()
    torch.manual_seed(123)
    a = aug(x, seed=7)
    torch.rand(100)  # move the global stream: views must not depend on it
    b = aug(x, seed=7)
    c = aug(x, seed=8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_augment_leaves_the_global_rng_untouched():
    aug = TwoViewAugment(AugmentConfig())
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    aug(images(), seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_grayscale_p1_gives_equal_channels():
    cfg = AugmentConfig(jitter_p=0.0, grayscale_p=1.0)
    v1, v2 = TwoViewAugment(cfg)(images(), seed=0)
    norm = Normalize()
    raw = v1 * norm.std + norm.mean  # undo the normalisation
    assert torch.allclose(raw[:, 0], raw[:, 1], atol=1e-5) and torch.allclose(raw[:, 1], raw[:, 2], atol=1e-5)


def test_bad_augment_config_names_the_key():
    with pytest.raises(ValueError, match="augment.crop_scale"):
        TwoViewAugment(AugmentConfig(crop_scale=[0.5, 0.2]))


def test_batch_seed_is_stable_and_distinct():
    assert batch_seed(0, 1, 2) == batch_seed(0, 1, 2)
    assert len({batch_seed(0, e, b) for e in range(5) for b in range(5)}) == 25
    assert 0 <= batch_seed(3, 4) < 2**63


@pytest.mark.parametrize("name,width,dim", [("small_conv", 4, 32), ("resnet18_cifar", 64, 512)])
def test_encoder_feature_shapes(name, width, dim):
    enc, feature_dim = build_encoder(name, width)
    assert feature_dim == dim
    enc.eval()
    with torch.no_grad():
        assert enc(torch.randn(2, 3, 32, 32)).shape == (2, dim)


def test_resnet18_has_the_cifar_stem():
    enc, _ = build_encoder("resnet18_cifar", 64)
    assert enc.conv1.kernel_size == (3, 3) and enc.conv1.stride == (1, 1)
    assert isinstance(enc.maxpool, torch.nn.Identity) and isinstance(enc.fc, torch.nn.Identity)


def test_model_returns_features_and_projections():
    enc, d = build_encoder("small_conv", 4)
    model = SSLModel(enc, d, hidden_dim=16, out_dim=8)
    h, z = model(torch.randn(3, 3, 32, 32))
    assert h.shape == (3, 32) and z.shape == (3, 8)
    assert isinstance(ProjectionHead(32).net[1], torch.nn.BatchNorm1d)


def test_unknown_encoder_lists_known():
    with pytest.raises(ValueError, match="resnet18_cifar"):
        build_encoder("vit", 64)
