import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.domains.super_resolution.inference import upscale
from contrasuite.domains.super_resolution.networks import EDSR


@pytest.fixture
def tiny_model():
    torch.manual_seed(0)
    return EDSR(scale=2, n_resblocks=1, n_feats=4).eval()


def test_tiled_equals_untiled_when_overlap_covers_the_receptive_field(tiny_model):
    # Receptive radius of this net: head 1 + block 2 + body 1 + upsampler 1 LR px (+ tail, < 1 LR px) = 6.
    lr = torch.rand(2, 3, 29, 23)
    whole = upscale(tiny_model, lr, 2)
    tiled = upscale(tiny_model, lr, 2, tile=8, overlap=7)
    assert tiled.shape == whole.shape == (2, 3, 58, 46)
    torch.testing.assert_close(tiled, whole, atol=1e-5, rtol=0)
    torch.testing.assert_close(whole, tiny_model(lr).clamp(0, 1))
    # Without context the seams differ: the overlap is what makes tiles exact.
    assert (upscale(tiny_model, lr, 2, tile=8, overlap=0) - whole).abs().max() > 1e-4


def test_bad_tiles_fail(tiny_model):
    with pytest.raises(ValueError, match="tile"):
        upscale(tiny_model, torch.rand(1, 3, 8, 8), 2, tile=0)
    with pytest.raises(ValueError, match="B, C, H, W"):
        upscale(tiny_model, torch.rand(3, 8, 8), 2)


def fake_run(tmp_path, model):
    """A run folder as the engine writes it: resolved config and a checkpoint holding the generator."""
    from pathlib import Path

    from contrasuite.pipelines.config import load_config, save_resolved

    config = Path(__file__).resolve().parents[3] / "configs" / "super_resolution" / "reduced_x2_l1.yaml"
    loaded = load_config(config, ["config.model.n_resblocks=1", "config.model.n_feats=4"])
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    save_resolved(loaded.resolved, run_dir / "config.yaml")
    from contrasuite.pipelines.checkpoint import REQUIRED_KEYS

    state = {key: {} for key in REQUIRED_KEYS} | {"modules": {"generator": model.state_dict()}}
    torch.save(state, run_dir / "checkpoints" / "best.pt")
    return run_dir


def test_upscale_command_on_a_folder(tiny_model, tmp_path, capsys):
    from contrasuite.pipelines.cli import main

    src = tmp_path / "in"
    src.mkdir()
    rgb = (np.random.default_rng(0).random((21, 17, 3)) * 255).astype(np.uint8)
    Image.fromarray(rgb).save(src / "colour.png")
    Image.fromarray(rgb[..., 0]).save(src / "grey.png")
    run_dir = fake_run(tmp_path, tiny_model)
    assert main(["upscale", str(run_dir), str(src), str(tmp_path / "out"), "--tile", "8", "--overlap", "7"]) == 0
    out = np.asarray(Image.open(tmp_path / "out" / "colour.png"))
    want = tiny_model(torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255).clamp(0, 1)
    want = (want[0] * 255).round().permute(1, 2, 0).to(torch.uint8).numpy()
    assert out.shape == (42, 34, 3) and np.abs(out.astype(int) - want.astype(int)).max() <= 1
    grey = Image.open(tmp_path / "out" / "grey.png")
    assert grey.mode == "L" and grey.size == (34, 42)
    assert main(["upscale", str(run_dir), str(tmp_path / "missing"), str(tmp_path / "o")]) == 2
    capsys.readouterr()
    (src / "broken.png").write_text("not an image")  # a folder skips it with one warning line
    assert main(["upscale", str(run_dir), str(src), str(tmp_path / "out2"), "--tile", "0"]) == 0
    err = capsys.readouterr().err
    assert "broken.png: not a readable image" in err and "skipped 1 of 3 files" in err
    assert sorted(p.name for p in (tmp_path / "out2").iterdir()) == ["colour.png", "grey.png"]
    assert main(["upscale", str(run_dir), str(src / "broken.png"), str(tmp_path / "o.png")]) == 2  # one bad input
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "INPUT " in err and "broken.png is not a readable image" in err
