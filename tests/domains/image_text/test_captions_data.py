import json

import numpy as np
import pytest
from PIL import Image

from contrasuite.core.task.errors import DataError
from contrasuite.domains.image_text.captions import attribute_group, build_items, skin_tone_caption
from contrasuite.domains.image_text.data import load_captions, load_emoji, read_captions_file, split_groups

ENTRIES = [
    {"name": "WOMAN RAISING HAND", "image": "a.png", "category": "People & Body", "subcategory": "person-gesture",
     "short_names": ["woman-raising-hand"],
     "skin_variations": {"1F3FE": {"image": "a-4.png"}, "1F3FB": {"image": "a-1.png"}}},
    {"name": "BLUE HEART", "image": "b.png", "category": "Smileys & Emotion", "subcategory": "heart",
     "short_names": ["blue_heart"]},
    {"name": "PEOPLE HOLDING HANDS", "image": "c.png", "category": "People & Body", "subcategory": "family",
     "short_names": ["people_holding_hands"], "skin_variations": {"1F3FB-1F3FF": {"image": "c-15.png"}}},
]


def test_captions_from_metadata():
    items = {i.image: i for i in build_items(ENTRIES)}
    assert items["a-4.png"].caption == "woman raising hand, medium-dark skin tone"
    assert items["a-4.png"].base == "a.png" and items["a-4.png"].skin_tones == ("medium-dark skin tone",)
    assert items["b.png"].caption == "blue heart" and items["b.png"].aliases == ("blue heart",)
    assert items["c-15.png"].caption == "people holding hands, light skin tone and dark skin tone"
    with pytest.raises(ValueError, match="1F3F0"):
        skin_tone_caption("X", "1F3F0")
    with pytest.raises(ValueError, match="name"):
        build_items([{"image": "x.png", "category": "c", "subcategory": "s"}])


def test_split_disjoint_by_emoji():
    groups = [f"g{i // 3}" for i in range(300)]
    splits = split_groups(groups, (0.1, 0.2), seed=0)
    seen = [{groups[i] for i in splits[s]} for s in ("train", "val", "test")]
    assert not (seen[0] & seen[1]) and not (seen[0] & seen[2]) and not (seen[1] & seen[2])
    assert sum(len(v) for v in splits.values()) == 300 and len(seen[2]) == 20
    assert split_groups(groups, (0.1, 0.2), seed=0) == splits


def test_real_emoji_skin_tones_stay_together(emoji_root):
    pairs = load_emoji(emoji_root, "twitter")
    splits = split_groups(pairs.groups, (0.1, 0.2), seed=0)
    train_bases = {pairs.groups[i] for i in splits["train"]}
    assert all(pairs.groups[i] not in train_bases for i in splits["test"])
    assert pairs.images.shape[1:] == (64, 64, 3) and pairs.images.dtype == np.uint8
    assert any(c.endswith(", medium-dark skin tone") for c in pairs.captions)


def test_caption_file_formats(tmp_path):
    for name in ("x.png", "y.png"):
        Image.fromarray(np.full((8, 8, 4), 200, np.uint8)).save(tmp_path / name)
    (tmp_path / "c.csv").write_text("image,caption\nx.png,a red cube\ny.png,a blue ball\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"image": "x.png", "caption": "a red cube"}) + "\n")
    coco = {"images": [{"id": 1, "file_name": "x.png"}, {"id": 2, "file_name": "y.png"}],
            "annotations": [{"image_id": 1, "caption": "a red cube"}, {"image_id": 1, "caption": "red block"},
                            {"image_id": 2, "caption": "a blue ball"}]}
    (tmp_path / "c.json").write_text(json.dumps(coco))
    assert read_captions_file(tmp_path / "c.csv") == [("x.png", "a red cube"), ("y.png", "a blue ball")]
    assert read_captions_file(tmp_path / "c.jsonl") == [("x.png", "a red cube")]
    pairs = load_captions(tmp_path / "c.json", tmp_path, size=16)
    assert pairs.images.shape == (3, 16, 16, 3) and pairs.groups == ["x.png", "x.png", "y.png"]
    (tmp_path / "bad.csv").write_text("path,text\nx.png,a\n")
    with pytest.raises(DataError, match="caption"):
        read_captions_file(tmp_path / "bad.csv")


def test_attribute_group_joins_colour_and_direction_variants():
    same = [("BLUE HEART", "RED HEART"), ("THUMBS UP SIGN", "THUMBS DOWN SIGN"),
            ("BLACK RIGHTWARDS ARROW", "LEFTWARDS BLACK ARROW"), ("WOMAN RUNNING", "WOMAN RUNNING FACING RIGHT"),
            ("BLACK LEFT-POINTING TRIANGLE", "BLACK RIGHT-POINTING TRIANGLE"), ("MAN RUNNING", "WOMAN RUNNING"),
            ("KEYCAP 2", "KEYCAP 8"), ("CLOCK FACE ONE OCLOCK", "CLOCK FACE SEVEN OCLOCK")]
    for a, b in same:
        assert attribute_group(a) == attribute_group(b), (a, b)
    for a, b in (("BLUE HEART", "BLUE BOOK"), ("WOMAN RUNNING", "PERSON RUNNING"), ("ROLLED-UP NEWSPAPER", "NEWSPAPER"),
                 ("FIRST PLACE MEDAL", "SECOND PLACE MEDAL")):
        assert attribute_group(a) != attribute_group(b), (a, b)
    items = {i.image: i for i in build_items(ENTRIES)}
    assert items["a-4.png"].group == items["a.png"].group == attribute_group("WOMAN RAISING HAND")
