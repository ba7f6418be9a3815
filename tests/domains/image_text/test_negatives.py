import random

import torch

from contrasuite.domains.image_text.captions import EmojiItem
from contrasuite.domains.image_text.image_negatives import HUES, KorniaEditor, dominant_hue
from contrasuite.domains.image_text.text_negatives import (
    LanguageModelGenerator, TextNegative, change_direction, change_number, change_relation, generate_text_negatives,
    is_false_negative, replace_colour, replace_gender, replace_object, replace_skin_tone, swap_attributes,
)

rng = random.Random(0)


def item(caption, sub="heart"):
    return EmojiItem(image="x.png", caption=caption, base="x.png", category="c", subcategory=sub)


def test_replace_colour_and_hue_edit():
    negs = replace_colour("blue heart", item("blue heart"), rng, 3)
    assert len(negs) == 3 and all(n.text.endswith(" heart") and n.text != "blue heart" for n in negs)
    assert all(n.edit == {"hue": ["blue", n.text[: -len(" heart")]]} for n in negs)
    assert replace_colour("light blue heart", None, rng, 1)[0].edit["hue"][0] == "light blue"
    # Unicode BLACK/WHITE of arrows and hands name a glyph style, not a colour
    assert replace_colour("black rightwards arrow", item("black rightwards arrow", "arrow"), rng, 2) == []


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
    image = torch.ones(3, 16, 16)
    image[:, 2:8, 2:8] = torch.tensor([0.0, 0.0, 1.0])[:, None, None]  # blue block, top left
    editor = KorniaEditor()
    flipped = editor(image, {"flip": "horizontal"})
    assert torch.equal(flipped, image.flip(-1)) and torch.equal(editor(flipped, {"flip": "horizontal"}), image)
    assert torch.equal(editor(image, {"flip": "vertical"}), image.flip(-2))
    for colour, hue in HUES.items():
        edited = editor(image, {"hue": ["blue", colour]}) if colour != "blue" else None
        if edited is not None:
            assert abs(torch.rad2deg(torch.tensor(dominant_hue(edited))) % 360 - hue) < 1.0 or abs(hue) < 1e-6
            assert torch.allclose(edited[:, 0, 0], torch.ones(3))  # white background untouched
    red = editor(image, {"hue": ["blue", "red"]})
    assert torch.allclose(red[:, 4, 4], torch.tensor([1.0, 0.0, 0.0]), atol=1e-5)
    # false negatives: a symmetric image flipped, a grey image hue-rotated
    sym = torch.ones(3, 16, 16)
    sym[:, 4:12, 4:12] = 0.2
    assert editor(sym, {"flip": "horizontal"}) is None and editor(sym, {"hue": ["blue", "red"]}) is None
    assert editor(image, {"hue": ["pink", "red"]}) is None  # pink is not reachable by a hue rotation
