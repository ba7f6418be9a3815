"""Every shipped image_text config trains a couple of steps and evaluates (tiny data, small inputs)."""

import json
from pathlib import Path

import pytest

from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.memory_format import has_layout
from contrasuite.pipelines.trainer import train

CONFIGS = sorted((Path(__file__).resolve().parents[3] / "configs" / "image_text").glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_smoke(path, tmp_path, emoji_root, tiny_open_clip):
    overrides = ["run.max_steps=2", "run.epochs=1", "run.health_every_steps=1", f"run.output_root={tmp_path}",
                 "config.data.limit=40", "config.batch_size=8", "config.eval_batch_size=16",
                 f"config.cache_dir={tmp_path / 'cache'}", "config.model.image_size=64", "run.precision=fp32"]
    if "open_clip" in path.stem:
        overrides += ["config.model.architecture=tiny-clip-test", f"config.model.model_config={tiny_open_clip}",
                      "config.model.image_size=32"]
    loaded = load_config(path, overrides, data_root=str(emoji_root))
    run_dir = train(loaded)
    metrics = json.loads((run_dir / "eval_val.json").read_text())["metrics"]
    assert 0.0 <= metrics["i2t_r1"] <= 100.0 and "google/t2i_r1" in metrics
    assert (run_dir / "checkpoints" / "last.pt").is_file()


@pytest.mark.slow
def test_stage_two_starts_from_stage_one(tmp_path, emoji_root):
    """``config.init_from`` loads the aligned heads; hard negatives reach the loss as extra columns."""
    common = ["run.max_steps=1", "run.epochs=1", "run.log_every_steps=1", "run.precision=fp32", f"run.output_root={tmp_path}", "config.data.limit=30",
              "config.batch_size=64", f"config.cache_dir={tmp_path / 'cache'}", "config.model.image_size=64",
              "run.health_every_steps=0"]
    configs = Path(__file__).resolve().parents[3] / "configs" / "image_text"
    first = train(load_config(configs / "reduced_align.yaml", common, data_root=str(emoji_root)))
    loaded = load_config(configs / "reduced_text_image_negatives.yaml", [*common, f"config.init_from={first}"],
                         data_root=str(emoji_root))
    second = train(loaded)
    rows = (second / "metrics.csv").read_text()
    assert "train/neg_texts" in rows and "train/neg_images" in rows
    neg_texts = [float(line.rsplit(",", 1)[1]) for line in rows.splitlines() if ",train/neg_texts," in line]
    assert neg_texts and neg_texts[0] > 0


@pytest.mark.slow
@pytest.mark.parametrize("ema", [0.0, 0.5])
def test_checkpoints_without_frozen_trunks_resume_exactly(tmp_path, emoji_root, ema):
    """Pretrained frozen trunks are left out of checkpoints (only their fingerprint is kept; also from the
    weight average's), and a run stopped after 2 steps resumes to the same weights as the uninterrupted run."""
    import torch

    from contrasuite.domains.image_text.models import FINGERPRINT_KEY
    from contrasuite.pipelines import checkpoint
    from contrasuite.pipelines.trainer import resume

    common = ["run.epochs=1", "run.precision=fp32", "run.deterministic=true", "run.health_every_steps=0",
              f"run.output_root={tmp_path}", "config.data.limit=40", "config.batch_size=8",
              f"config.cache_dir={tmp_path / 'cache'}", "config.model.image_size=64", f"config.ema={ema}"]
    path = Path(__file__).resolve().parents[3] / "configs" / "image_text" / "reduced_align.yaml"
    full = train(load_config(path, common))
    stopped = train(load_config(path, [*common, "run.max_steps=2"]))
    state = checkpoint.load(stopped / "checkpoints" / "last.pt")
    assert state["position"]["global_step"] == 2
    modules = ["model", "model_ema"] if ema else ["model"]
    assert sorted(state["modules"]) == sorted(["objective", *modules])
    for name in modules:
        model = state["modules"][name]
        assert FINGERPRINT_KEY in model and not any(k.startswith(("image_trunk.", "text_trunk.")) for k in model)
    resume(stopped, ["run.max_steps=null"])  # continue to the uninterrupted run's end
    done, expected = (checkpoint.load(run / "checkpoints" / "last.pt") for run in (stopped, full))
    assert done["position"] == expected["position"] and done["position"]["global_step"] > 2
    for name in modules:
        for key, value in expected["modules"][name].items():
            assert torch.equal(done["modules"][name][key], value), (name, key)


@pytest.mark.parametrize("setting", ["channels_last", "contiguous"])
def test_run_memory_format_lays_out_the_towers_and_their_average(tmp_path, emoji_root, setting):
    """The towers are called through methods, not a DDP wrapper; ``run.memory_format`` reaches them (and the weight
    average) through ``ctx.lay_out`` (it had been ignored)."""
    import torch

    from contrasuite.pipelines.trainer import Trainer

    layout = torch.channels_last if setting == "channels_last" else torch.contiguous_format
    overrides = ["run.epochs=1", f"run.output_root={tmp_path}", "config.data.limit=20", "config.batch_size=8",
                 f"config.cache_dir={tmp_path / 'cache'}", "config.model.image_size=64", "config.ema=0.5",
                 "config.model.freeze_trunks=false", f"run.memory_format={setting}"]
    configs = Path(__file__).resolve().parents[3] / "configs" / "image_text"
    trainer = Trainer(load_config(configs / "reduced_align.yaml", overrides, data_root=str(emoji_root)))
    task = trainer.task
    weights = [p for m in (task.model, task.model_ema) for p in m.parameters() if p.dim() == 4]
    # the layout's own strides (a 1 x 1 or depthwise weight is contiguous in both layouts)
    assert len(weights) > 10 and all(has_layout(w, layout) for w in weights)
    trainer.close()
