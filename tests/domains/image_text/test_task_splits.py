"""Held-out emoji stay unseen: no negative image crosses a split, and cached features are the edited images'."""

from pathlib import Path

import numpy as np
import pytest
import torch

from contrasuite.domains.image_text.data import load_emoji
from contrasuite.domains.image_text.negatives import NegativesConfig, generate
from contrasuite.domains.image_text.config import DataConfig
from contrasuite.domains.image_text.style_data import split_pairs
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import Trainer

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "image_text"


@pytest.mark.slow
def test_no_negative_image_copies_an_image_of_another_split(emoji_root):
    """The flip of a held-out ``thumbs up sign`` is the training ``thumbs down sign`` unless both share a split
    (splitting by base emoji alone scored the held-out caption against a training image, 9 % accuracy)."""
    pairs = load_emoji(emoji_root, "twitter")
    tolerance = NegativesConfig().duplicate_tolerance
    _, images = generate({"twitter": pairs}, NegativesConfig())
    records, edited = images["twitter"]
    splits = split_pairs(pairs, images, DataConfig())
    index = {k: i for i, k in enumerate(pairs.keys)}
    split_of = np.empty(len(pairs), dtype=object)
    for name, rows in splits.items():
        split_of[rows] = name
    flat = torch.from_numpy(pairs.images.reshape(len(pairs), -1)).float() / 255
    made = [r for r in records if "image_index" in r]
    assert sum(r["operation"] == "change_direction" for r in made) > 100
    copies = 0
    for start in range(0, len(made), 64):
        chunk = made[start: start + 64]
        neg = torch.from_numpy(np.stack([edited[r["image_index"]] for r in chunk]).reshape(len(chunk), -1)).float() / 255
        mae = torch.cdist(neg, flat, p=1) / flat.shape[1]  # mean absolute error, [chunk, N]
        for rec, row in zip(chunk, mae):
            other = split_of != split_of[index[rec["key"]]]
            assert row[torch.from_numpy(other)].min() > tolerance, (rec["caption"], rec["negative"])
            copies += int(row.min() < 0.01)
    assert copies > 100  # many flips do copy another emoji, within the same split
    for rec in records:  # dataset negatives (skin tones of the same emoji) stay in their split too
        if "image_key" in rec:
            assert split_of[index[rec["image_key"]]] == split_of[index[rec["key"]]]


def test_cached_features_are_the_edited_images(tmp_path, emoji_root):
    """A flipped or recoloured negative's cached trunk features come from the edited pixels, not the source."""
    overrides = [f"run.output_root={tmp_path}", "config.data.limit=30", "config.data.unseen_style=null",
                 "config.model.pretrained_trunks=false", "config.model.image_size=64", "run.precision=fp32",
                 f"config.cache_dir={tmp_path / 'cache'}"]
    task = Trainer(load_config(CONFIGS / "reduced_text_image_negatives.yaml", overrides, data_root=str(emoji_root))).task
    style = task.styles[task.train_style]
    index = {k: i for i, k in enumerate(style.pairs.keys)}
    edited = [(j, r) for j, r in enumerate(style.neg_records) if r["editor"] == "kornia"]
    assert {r["operation"] for _, r in edited} == {"change_direction", "replace_colour"}
    model = task.model.eval()
    for j, rec in edited:
        row, source = style.neg_rows[j], index[rec["key"]]
        with torch.no_grad():
            fresh = model.image_features(torch.from_numpy(style.images[[row, source]])).half().float()
        assert not np.array_equal(style.images[row], style.images[source])
        assert torch.allclose(style.features[row].float(), fresh[0], atol=1e-2)
        assert not torch.allclose(style.features[row].float(), style.features[source].float(), atol=1e-2)
    again = Trainer(load_config(CONFIGS / "reduced_text_image_negatives.yaml", overrides, data_root=str(emoji_root))).task
    assert torch.equal(again.styles[again.train_style].features, style.features)  # read back from the cache
