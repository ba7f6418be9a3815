"""Every shipped translation config trains a few engine steps at tiny size; evaluation and translate work."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from contrasuite.pipelines import checkpoint
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.memory_format import has_layout
from contrasuite.pipelines.trainer import Trainer, evaluate
from contrasuite.domains.translation.translate import load_generator, main as translate_main

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs" / "translation").glob("*.yaml"))


def write_images(folder: Path, n: int, size: tuple[int, int], seed: int, mode: str = "RGB") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        arr = rng.integers(0, 256, (*size, len(mode)), dtype=np.uint8)
        Image.fromarray(arr, mode).save(folder / f"img{i}.png")


@pytest.fixture(scope="module")
def folder_pair(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pair")
    for name, seed in (("trainA", 0), ("trainB", 1), ("testA", 2), ("testB", 3)):
        write_images(root / name, 2, (40, 48), seed)
    return root


@pytest.fixture
def cache(emoji_cache) -> Path:
    return emoji_cache


def run(config: Path, root: Path, out: Path, cache: Path, tiny: list[str], extra: tuple[str, ...] = ()) -> Path:
    loaded = load_config(config, [*tiny, f"run.output_root={out}", f"config.data.cache_dir={cache}", *extra],
                         data_root=str(root))
    torch.manual_seed(0)
    return Trainer(loaded).fit()


def test_shipped_configs_exist():
    assert {"cut_emoji", "fastcut_emoji", "gan_emoji", "reduced_cut_emoji", "reduced_fastcut_emoji", "reduced_gan_emoji",
            "cut_horse2zebra", "fastcut_horse2zebra", "single_image_monet_etretat"} <= {p.stem for p in CONFIGS}


def test_the_optimizers_of_a_shipped_config_follow_its_optim_section(data_root, cache, tiny_overrides, tmp_path):
    """reduced_cut_emoji: Adam with the config's lr and betas for the discriminator, the generator and the head (with
    the objective); each lr held until the schedule's start, then linear to 0 at its end (computed here from the
    config, in epochs of the task's steps)."""
    config = next(p for p in CONFIGS if p.stem == "reduced_cut_emoji")
    own_schedule = [o for o in tiny_overrides if not o.startswith("config.optim")]
    loaded = load_config(config, [*own_schedule, f"run.output_root={tmp_path}", f"config.data.cache_dir={cache}"],
                         data_root=str(data_root))
    trainer = Trainer(loaded)
    task, o = trainer.task, loaded.config.optim
    optimizers = task.optimizers()
    assert list(optimizers) == ["discriminator", "generator", "head"]
    params = {"discriminator": list(task.discriminator.parameters()), "generator": list(task.generator.parameters()),
              "head": [*task.head.parameters(), *task.objective.parameters()]}
    for name, opt in optimizers.items():
        (group,) = opt.param_groups
        assert isinstance(opt, torch.optim.Adam) and group["params"] == params[name]
        assert group["initial_lr"] == o.lr and group["betas"] == tuple(o.betas)
    start, end = (round(length.epochs * task.steps_per_epoch) for length in (o.schedule.start, o.schedule.end))
    assert 0 < start < end
    for s in range(end + 2):
        want = o.lr * (1 - min(1, max(0, (s - start) / (end - start))))
        for name, opt in optimizers.items():
            assert opt.param_groups[0]["lr"] == pytest.approx(want, rel=1e-12, abs=1e-18), (name, s)
            task.schedulers()[name].step()
    trainer.close()


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_config_trains_and_validates(config, data_root, folder_pair, cache, tiny_overrides, tmp_path):
    extra = (f"config.data.path={folder_pair}", "config.data.load_size=40") if "horse2zebra" in config.stem else ()
    run_dir = run(config, data_root, tmp_path / "runs", cache, tiny_overrides, extra)
    val = json.loads((run_dir / "eval_val.json").read_text())["metrics"]
    assert math.isfinite(val["fd"]) and math.isfinite(val["kid"]) and math.isfinite(val["input_kid"])
    if "emoji" in config.stem:
        assert 0 < val["ssim"] <= 1 and val["psnr"] > 0
    assert (run_dir / "checkpoints" / "best.pt").is_file() and list((run_dir / "samples").glob("val_step*.png"))


def test_objective_swap_test_eval_and_translate(data_root, cache, tiny_overrides, tmp_path, capsys):
    config = next(p for p in CONFIGS if p.stem == "reduced_cut_emoji")
    extra = ("config.objective.terms.0={name: dhel, temperature: 0.07}", "run.precision=bf16", "config.ema=0.9")
    run_dir = run(config, data_root, tmp_path / "runs", cache, tiny_overrides, extra)
    result = evaluate(run_dir, "last")
    assert {"psnr", "ssim", "fd", "kid", "input_psnr", "input_ssim", "input_fd", "input_kid"} <= set(result["metrics"])
    saved = checkpoint.load(run_dir / "checkpoints" / "last.pt")["modules"]
    loaded = load_generator(run_dir, "last").state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in saved["generator_ema"].items())  # the average, not the generator
    assert not all(torch.equal(loaded[k], v) for k, v in saved["generator"].items())
    src = tmp_path / "in"
    write_images(src, 2, (30, 22), 5, mode="RGBA")  # odd size, with alpha
    (src / "broken.png").write_text("not an image")  # skipped with one warning, the rest translated
    dst = tmp_path / "out"
    assert translate_main([str(run_dir), str(src), str(dst), "--checkpoint", "last", "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert "skipping " in err and "broken.png: not a readable image" in err and "skipped 1 of 3 files" in err
    outs = sorted(dst.glob("*.png"))
    assert [p.name for p in outs] == ["img0.png", "img1.png"]
    assert all(Image.open(p).size == (22, 30) and Image.open(p).mode == "RGB" for p in outs)
    assert translate_main([str(run_dir), str(tmp_path / "missing"), str(dst)]) == 2


def test_run_folder_from_before_discriminator_antialias_evaluates_as_trained(data_root, cache, tiny_overrides, tmp_path):
    # A run trained with the stride-2 discriminator (the only one before config.discriminator.antialias existed),
    # its config.yaml then stripped of the key as such a folder has it.
    config = next(p for p in CONFIGS if p.stem == "reduced_gan_emoji")
    run_dir = run(config, data_root, tmp_path / "runs", cache, tiny_overrides, ("config.discriminator.antialias=false",))
    saved = run_dir / "config.yaml"
    text = saved.read_text()
    assert "antialias: false" in text
    saved.write_text(text.replace("    antialias: false\n", "", 1))
    assert "antialias: false" not in saved.read_text()
    with pytest.warns(UserWarning, match="without anti-aliasing"):
        result = evaluate(run_dir, "last")  # the checkpoint's discriminator loads: same network
    assert math.isfinite(result["metrics"]["kid"])
    # A folder that names the new default is built with it, and its old checkpoint is refused, not loaded.
    saved.write_text(text.replace("    antialias: false\n", "    antialias: true\n", 1))
    with pytest.raises(checkpoint.CheckpointError, match="discriminator"):
        evaluate(run_dir, "last")
    # Resuming the stripped folder is refused until the key is given (the checkpoint's config has it).
    from contrasuite.pipelines.trainer import resume

    saved.write_text(text.replace("    antialias: false\n", "", 1))
    with pytest.raises(checkpoint.CheckpointError, match="config.discriminator.antialias"):
        resume(run_dir, ["run.epochs=2"])


@pytest.mark.parametrize("setting, layout", [("channels_last", torch.channels_last),
                                              ("contiguous", torch.contiguous_format)])
def test_run_memory_format_lays_out_the_generator_discriminator_and_average(data_root, cache, tiny_overrides, tmp_path,
                                                                            setting, layout):
    """The task averages its gradients itself (no ``ctx.wrap``); ``run.memory_format`` reaches its networks through
    ``ctx.lay_out`` (it had been ignored: a shipped config with ``channels_last`` ran NCHW)."""
    config = next(p for p in CONFIGS if p.stem == "reduced_cut_emoji")
    loaded = load_config(config, [*tiny_overrides, f"run.output_root={tmp_path}", f"config.data.cache_dir={cache}",
                                  f"run.memory_format={setting}", "config.ema=0.5"], data_root=str(data_root))
    trainer = Trainer(loaded)
    task = trainer.task
    weights = [p for m in (task.generator, task.discriminator, task.generator_ema) for p in m.parameters()
               if p.dim() == 4]
    # the layout's own strides (a 1 x 1 or depthwise weight is contiguous in both layouts)
    assert len(weights) > 10 and all(has_layout(w, layout) for w in weights)
    trainer.close()
