import math
import random

import kornia
import numpy as np
import torch

from contrasuite.domains.image_text.captions import EmojiItem
from contrasuite.domains.image_text.image_negatives import HUES, KorniaEditor
from contrasuite.domains.image_text.negatives import near_copies
from contrasuite.domains.image_text.text_negatives import (
    LanguageModelGenerator, TextNegative, change_direction, change_number, change_relation, generate_text_negatives,
    is_false_negative, replace_colour, replace_gender, replace_object, replace_skin_tone, swap_attributes,
)

rng = random.Random(0)


def item(caption, sub="heart", tones=()):
    return EmojiItem(image="x.png", caption=caption, base="x.png", category="c", subcategory=sub, skin_tones=tones)


def test_replace_colour_and_hue_edit():
    negs = replace_colour("blue heart", item("blue heart"), rng, 3)
    assert len(negs) == 3 and all(n.text.endswith(" heart") and n.text != "blue heart" for n in negs)
    assert all(n.edit == {"hue": ["blue", n.text[: -len(" heart")]]} for n in negs)
    assert replace_colour("light blue heart", None, rng, 1)[0].edit["hue"][0] == "light blue"
    # Unicode BLACK/WHITE of arrows and hands name a glyph style, not a colour
    assert replace_colour("black rightwards arrow", item("black rightwards arrow", "arrow"), rng, 2) == []
    # skin hues overlap red hair: the text negative stays, no image edit claims to realise it
    caption = "man: red hair, medium-dark skin tone"
    negs = replace_colour(caption, item(caption, "person", ("medium-dark skin tone",)), rng, 2)
    assert len(negs) == 2 and all(n.edit is None for n in negs)


def test_replace_skin_tone_gender_number_relation():
    negs = replace_skin_tone("woman raising hand, dark skin tone", None, rng, 2)
    assert len(negs) == 2 and all(n.text.startswith("woman raising hand, ") and "dark skin tone" not in n.text.split(", ")[1][:4] for n in negs)
    assert replace_skin_tone("blue heart", None, rng, 2) == []
    assert [n.text for n in replace_gender("man running, dark skin tone", None, rng, 2)] == ["woman running, dark skin tone"]
    assert all(n.text.startswith("keycap ") and n.text != "keycap 1" for n in change_number("keycap 1", None, rng, 2))
    assert [n.text for n in change_relation("heart with arrow", None, rng, 2)] == ["heart without arrow"]


def test_swap_attributes_binds_positions():
    negs = swap_attributes("people holding hands, light skin tone and dark skin tone", None, rng, 2)
    assert [n.text for n in negs] == ["people holding hands, dark skin tone and light skin tone"]
    assert [n.text for n in swap_attributes("a red cube and a blue ball", None, rng, 2)] == ["a blue cube and a red ball"]
    assert swap_attributes("red and blue ball", None, rng, 2) == []  # both bound to the same object


def test_replace_object_and_direction():
    negs = replace_object("red apple", item("red apple"), rng, 2, vocabulary=["apple", "pear", "plum"])
    assert {n.text for n in negs} <= {"red pear", "red plum"} and negs
    assert {n.text for n in replace_object("a dog on a bench", None, rng, 5)} and all(
        n.operation == "replace_object" for n in replace_object("a dog on a bench", None, rng, 5))
    negs = change_direction("north west arrow", None, rng, 2)
    assert [(n.text, n.edit["flip"]) for n in negs] == [("north east arrow", "horizontal"), ("south west arrow", "vertical")]
    assert [n.text for n in change_direction("black right-pointing triangle", None, rng, 2)] == ["black left-pointing triangle"]
    assert [n.text for n in change_direction("left-facing fist", None, rng, 2)] == ["right-facing fist"]
    for caption in ("rolled-up newspaper", "upside-down face", "left luggage", "page facing up"):
        assert change_direction(caption, None, rng, 2) == []
    # a flipped South Korean flag is not the North Korean flag: place names are no directions
    assert change_direction("south korea flag", item("south korea flag", "country-flag"), rng, 2) == []


def test_false_negative_filter():
    assert is_false_negative(TextNegative("right left arrow", "change_direction"), ["left right arrow"])
    assert is_false_negative(TextNegative("woman and man holding hands", "replace_gender"), ["man and woman holding hands"])
    assert is_false_negative(TextNegative("person running", "replace_gender"), ["man running"])
    assert is_false_negative(TextNegative("Gray  Heart", "replace_colour"), ["grey heart"])
    assert not is_false_negative(TextNegative("red heart", "replace_colour"), ["blue heart"])
    swapped = TextNegative("x, dark skin tone and light skin tone", "swap_attributes")
    assert not is_false_negative(swapped, ["x, light skin tone and dark skin tone"])
    # the generator drops what the filter flags, e.g. left/right swapped in a symmetric caption
    out = generate_text_negatives("left right arrow", None, [lambda c, i, r: change_direction(c, i, r, 2)], rng)
    assert out == []


def test_language_model_generator_is_filtered():
    lm = LanguageModelGenerator(complete=lambda prompt: "1. red heart\n2. blue heart\n- green heart\n", k=3)
    out = generate_text_negatives("blue heart", None, [lm], rng)
    assert [n.text for n in out] == ["red heart", "green heart"] and out[0].operation == "language_model"


def test_kornia_editor_is_exact():
    blue, red = torch.tensor([85, 172, 238]) / 255, torch.tensor([221, 46, 68]) / 255  # Twemoji's blue and red
    image = torch.ones(3, 16, 16)
    image[:, 2:8, 2:8] = blue[:, None, None]  # top left
    image[:, 10:14, 10:14] = red[:, None, None]  # bottom right
    editor = KorniaEditor()
    flipped = editor(image, {"flip": "horizontal"})
    assert torch.equal(flipped, image.flip(-1)) and torch.equal(editor(flipped, {"flip": "horizontal"}), image)
    assert torch.equal(editor(image, {"flip": "vertical"}), image.flip(-2))
    # only the named colour changes: blue -> green leaves the red block and the white background alone
    for target in ("green", "purple", "red", "yellow"):
        edited = editor(image, {"hue": ["blue", target]})
        assert torch.equal(edited[:, 10:, 10:], image[:, 10:, 10:]) and torch.equal(edited[:, 0, 0], torch.ones(3))
        hue, sat, val = kornia.color.rgb_to_hsv(edited[None, :, 4:5, 4:5])[0, :, 0, 0]
        assert abs(math.remainder(math.degrees(hue) - HUES[target], 360)) < 1.0
        assert abs(val - blue.max()) < 1e-4  # a hue rotation keeps value (and saturation)
    # false negatives: a symmetric image flipped, a grey image or an absent colour hue-rotated
    sym = torch.ones(3, 16, 16)
    sym[:, 4:12, 4:12] = 0.2
    assert editor(sym, {"flip": "horizontal"}) is None and editor(sym, {"hue": ["blue", "red"]}) is None
    assert editor(image, {"hue": ["yellow", "blue"]}) is None  # no yellow pixels to recolour
    assert editor(image, {"hue": ["pink", "red"]}) is None  # pink is not reachable by a hue rotation


def test_near_copies():
    images = np.random.default_rng(0).integers(0, 256, (5, 8, 8, 3), dtype=np.uint8)
    almost = images[3].copy()
    almost[0, 0] = 0  # one pixel off: still a copy
    brighter = np.clip(images[1].astype(int) + 40, 0, 255).astype(np.uint8)
    assert near_copies(images, [images[2], almost, brighter], exclude=[0, 0, 1], tolerance=0.015) == [2, 3, None]
    assert near_copies(images, [images[2]], exclude=[2], tolerance=0.015) == [None]  # the source is skipped
