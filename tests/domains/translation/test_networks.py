"""Network shapes: generator sizes and CUT's layer indexing, the 70x70 PatchGAN map, the head."""

import pytest
import torch

from contrasuite.domains.translation.networks import (
    PatchDiscriminator, PatchHead, ResnetGenerator, default_nce_layers, gather_patches, sample_locations,
    translate_any_size,
)


@pytest.mark.parametrize("antialias", [True, False])
def test_generator_shapes_and_nce_layers(antialias):
    g = ResnetGenerator(ngf=4, n_blocks=5, antialias=antialias)
    x = torch.randn(2, 3, 32, 32)
    assert g(x).shape == x.shape and g(x).abs().max() <= 1
    layers = default_nce_layers(5)
    assert layers == [0, 4, 8, 12, 16]
    feats = g.encode(x, layers)
    # padded input, first down conv (full res with anti-aliasing, half without), second, blocks 1 and 5
    first = 32 if antialias else 16
    assert [tuple(f.shape[1:]) for f in feats] == [(3, 38, 38), (8, first, first), (16, 16, 16) if antialias else (16, 8, 8),
                                                   (16, 8, 8), (16, 8, 8)]
    assert [g.channels[i] for i in layers] == [f.shape[1] for f in feats]
    with pytest.raises(ValueError, match="nce_layers"):
        g.encode(x, [0, 30])


@pytest.mark.parametrize("residual", [False, True])
def test_one_pass_gives_the_translation_and_the_encoders_features(residual):
    torch.manual_seed(0)
    g = ResnetGenerator(ngf=4, n_blocks=3, residual=residual)
    x = torch.rand(2, 3, 16, 16) * 2 - 1
    out, feats = g.forward_and_encode(x, [12, 0, 4])
    assert torch.equal(out, g(x))
    assert all(torch.equal(a, b) for a, b in zip(feats, g.encode(x, [12, 0, 4])))
    assert len(feats) == 3 and feats[0].shape[1] == g.channels[12]
    with pytest.raises(ValueError, match="nce_layers"):
        g.forward_and_encode(x, [g.n_encoder_layers])


def test_default_layers_scale_with_blocks():
    assert default_nce_layers(9) == [0, 4, 8, 12, 16]
    assert default_nce_layers(4) == [0, 4, 8, 12, 15]


@pytest.mark.parametrize("antialias", [True, False])
def test_patchgan_is_70x70_with_30x30_map_at_256(antialias):
    d = PatchDiscriminator(ndf=4, n_layers=3, antialias=antialias)
    assert d(torch.randn(1, 3, 256, 256)).shape == (1, 1, 30, 30)
    assert d(torch.randn(2, 3, 64, 64)).shape == (2, 1, 6, 6)
    # the same parameters either way (CUT's layer indices differ), so neither form's checkpoint loads into the other
    shapes = [p.shape for p in d.parameters()]
    other = PatchDiscriminator(ndf=4, n_layers=3, antialias=not antialias)
    assert shapes == [p.shape for p in other.parameters()]
    with pytest.raises(RuntimeError, match="Missing key"):
        other.load_state_dict(d.state_dict())


def test_head_sampling_and_unit_outputs():
    feat = torch.randn(2, 6, 5, 5)
    idx = sample_locations(feat, 256)
    assert sorted(idx.tolist()) == list(range(25))  # fewer locations than patches: all of them
    idx = sample_locations(feat, 7)
    patches = gather_patches(feat, idx)
    assert patches.shape == (2, 7, 6)
    torch.testing.assert_close(patches[1, 3], feat[1, :, idx[3] // 5, idx[3] % 5])
    head = PatchHead([6], dim=16)
    z = head([patches])[0]
    assert z.shape == (2, 7, 16)
    raw = head.mlps[0](patches)  # CUT's Normalize: z / (|z| + 1e-7), a little under unit length when |z| is small
    torch.testing.assert_close(z, raw / (raw.norm(dim=-1, keepdim=True) + 1e-7))


def test_any_size_translation_keeps_size():
    g = ResnetGenerator(ngf=4, n_blocks=1)
    assert translate_any_size(g, torch.randn(1, 3, 30, 22)).shape == (1, 3, 30, 22)


@pytest.mark.parametrize("size", [(5, 7), (8, 8), (30, 22), (13, 16)])
def test_any_size_pad_is_reflection_padding(size):
    """The gather-based pad (what keeps H, W free in an export) pads exactly as ``F.pad``'s reflect mode."""
    x = torch.randn(1, 3, *size)
    seen = []
    translate_any_size(lambda padded: seen.append(padded) or padded, x)
    h, w = size
    assert torch.equal(seen[0], torch.nn.functional.pad(x, (0, -w % 4, 0, -h % 4), mode="reflect"))


def test_global_skip_starts_near_the_identity():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    plain = ResnetGenerator(ngf=8, n_blocks=2)
    skip = ResnetGenerator(ngf=8, n_blocks=2, residual=True)
    skip.load_state_dict(plain.state_dict())  # same weights: only the skip differs
    near = (skip(x) - x).abs().mean()
    assert near < 0.05 and (plain(x) - x).abs().mean() > 10 * near
    skip(x).sum().backward()
    assert skip.model[1].weight.grad.abs().sum() > 0


def test_the_residual_blocks_run_as_winograd_products_with_the_direct_convolutions_results(monkeypatch):
    """ngf 32 on 128 px: the blocks' 128-channel 32 x 32 convolutions take the Winograd path on the CPU in fp32;
    the translation and the weights' gradients equal those of the direct convolutions up to fp32 rounding (the
    biases before instance norm have no gradient but rounding noise)."""
    from contrasuite.domains import winograd_conv

    torch.manual_seed(0)
    g = ResnetGenerator(ngf=32, n_blocks=2)
    x = torch.rand(1, 3, 128, 128) * 2 - 1
    taken = []
    real = winograd_conv.winograd_conv3x3
    monkeypatch.setattr(winograd_conv, "winograd_conv3x3", lambda *a: taken.append(1) or real(*a))

    def run():
        g.zero_grad()
        out = g(x)
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in g.parameters() if p.dim() == 4]

    ours = run()
    assert len(taken) == 4
    monkeypatch.setattr(winograd_conv, "takes_winograd", lambda *a: False)
    direct = run()
    assert len(taken) == 4
    torch.testing.assert_close(ours[0], direct[0], rtol=1e-4, atol=1e-5)
    for a, b in zip(ours[1], direct[1]):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4 * b.abs().max().item())
