"""Emoji metadata -> captions with typed attributes.

Each emoji image gets a caption from its Unicode name and, for skin-tone variations, the tones:
``"WOMAN RAISING HAND"`` with ``1F3FE`` -> ``"woman raising hand, medium-dark skin tone"``. The
metadata also says which words are which attribute, so negative generation (``text_negatives``)
edits a known attribute: skin tone, gender, colour, direction, number.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

SKIN_TONES = {
    "1F3FB": "light skin tone",
    "1F3FC": "medium-light skin tone",
    "1F3FD": "medium skin tone",
    "1F3FE": "medium-dark skin tone",
    "1F3FF": "dark skin tone",
}
"""Fitzpatrick modifier code points and their CLDR names."""

GENDER_PAIRS = (("man", "woman"), ("men", "women"), ("boy", "girl"), ("male", "female"), ("king", "queen"),
                ("prince", "princess"), ("father", "mother"), ("grandfather", "grandmother"))
"""Gender words and their counterparts (``person`` is a hypernym of both, never a negative)."""

COLOURS = ("light blue", "red", "orange", "yellow", "green", "blue", "purple", "brown", "black", "white",
           "pink", "grey")
"""Colour words, multi-word names first so that ``light blue`` is matched before ``blue``."""

COLOUR_SYNONYMS = {"gray": "grey"}

DIRECTION_PAIRS = (("left", "right"), ("leftwards", "rightwards"), ("up", "down"), ("upwards", "downwards"),
                   ("north", "south"), ("east", "west"), ("clockwise", "anticlockwise"))
"""Direction words and their mirror images."""

HORIZONTAL = frozenset({"left", "right", "leftwards", "rightwards", "east", "west"})
VERTICAL = frozenset({"up", "down", "upwards", "downwards", "north", "south"})

NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
           "twelve")
DIGITS = tuple(str(i) for i in range(10))

RELATION_PAIRS = (("above", "below"), ("over", "under"), ("in", "on"), ("with", "without"), ("before", "after"),
                  ("inside", "outside"), ("top", "bottom"))
"""Relation words and their replacements (free text and emoji names)."""

TYPOGRAPHIC_SUBCATEGORIES = ("arrow", "hand", "keycap", "av-symbol", "geometric", "other-symbol", "alphanum")
"""Subcategories where Unicode's ``BLACK``/``WHITE`` mean filled/outlined glyphs, not the rendered colour."""

FLAG_SUBCATEGORIES = ("country-flag", "subdivision-flag")
"""Flags: ``north``/``south`` there are parts of place names, not directions."""

_ROTATIONS = ("clockwise", "anticlockwise")
_ATTRIBUTE_WORDS = (*COLOURS, *(w for p in DIRECTION_PAIRS for w in p), *_ROTATIONS, *(w for p in GENDER_PAIRS for w in p),
                    *NUMBERS, *DIGITS)


def word_pattern(words: Sequence[str], after: str = r"(?![\w-])") -> re.Pattern:
    """Any of ``words`` as a whole word (longest first), not inside a hyphenated word unless ``after``
    allows a following hyphen; group 1 is the word."""
    alternatives = sorted(words, key=len, reverse=True)
    return re.compile(r"(?<![\w-])(" + "|".join(re.escape(w) for w in alternatives) + r")" + after)


_ATTRIBUTE_RE = word_pattern(_ATTRIBUTE_WORDS, after=r"(?![\w])")


def attribute_group(name: str) -> str:
    """The split group of an emoji name: its words with every colour, direction, gender and number word
    blanked, in any order, and a trailing ``facing right`` dropped.

    Emoji that differ only in such a word (``blue heart`` / ``red heart``, ``thumbs up sign`` / ``thumbs
    down sign``, ``black rightwards arrow`` / ``leftwards black arrow``, ``woman running`` / ``woman
    running facing right`` / ``man running``, ``keycap 2`` / ``keycap 8``) are minimal pairs: one's
    negative caption is the other's caption, and a flip or hue rotation of one is (nearly) the other.
    In different splits, a held-out emoji's negative image would be a training image and its caption a
    training negative of a look-alike training image, so the test would measure memorisation.
    """
    caption = re.sub(r" facing (left|right)$", "", name_caption(name))
    return " ".join(sorted(_ATTRIBUTE_RE.sub("*", caption).split(" ")))


@dataclass(frozen=True)
class EmojiItem:
    """One emoji image: its file name, caption, base emoji and attributes."""

    image: str
    caption: str
    base: str
    """The base emoji's file name: every skin-tone variation shares it."""
    category: str
    subcategory: str
    skin_tones: tuple[str, ...] = ()
    aliases: tuple[str, ...] = field(default=())
    """Other true descriptions (short names), never used as negatives."""
    group: str = ""
    """The split group (:func:`attribute_group` of the base emoji's name; splits are by group)."""


def normalise(text: str) -> str:
    """Lower case, single spaces, synonyms mapped (``gray`` -> ``grey``): the form captions are compared in."""
    words = re.sub(r"\s+", " ", text.strip().lower()).split(" ")
    return " ".join(COLOUR_SYNONYMS.get(w, w) for w in words)


def name_caption(name: str) -> str:
    """A Unicode emoji name as a caption: ``"BLACK HEART SUIT"`` -> ``"black heart suit"``."""
    if not name or not name.strip():
        raise ValueError("emoji name is empty")
    return normalise(name.replace("_", " "))


def skin_tone_caption(name: str, code: str) -> tuple[str, tuple[str, ...]]:
    """Caption and tones of a skin-tone variation; ``code`` is ``"1F3FE"`` or ``"1F3FB-1F3FF"`` (two people)."""
    parts = code.upper().split("-")
    unknown = [p for p in parts if p not in SKIN_TONES]
    if unknown:
        raise ValueError(f"unknown skin tone modifier(s) {unknown} in {code!r}; known: {sorted(SKIN_TONES)}")
    tones = tuple(SKIN_TONES[p] for p in parts)
    tone_text = tones[0] if len(set(tones)) == 1 else " and ".join(tones)
    return f"{name_caption(name)}, {tone_text}", tones


def build_items(metadata: list[dict[str, Any]]) -> list[EmojiItem]:
    """Every image of ``emoji.json`` (base emoji and their skin-tone variations) as :class:`EmojiItem`."""
    items = []
    for i, entry in enumerate(metadata):
        for key in ("name", "image", "category", "subcategory"):
            if not entry.get(key):
                raise ValueError(f"emoji.json entry {i}: missing {key!r}")
        base = entry["image"]
        aliases = tuple(normalise(s.replace("_", " ")) for s in entry.get("short_names") or ())
        common = dict(base=base, category=entry["category"], subcategory=entry["subcategory"],
                      group=attribute_group(entry["name"]))
        items.append(EmojiItem(image=base, caption=name_caption(entry["name"]), aliases=aliases, **common))
        for code, variation in (entry.get("skin_variations") or {}).items():
            caption, tones = skin_tone_caption(entry["name"], code)
            tone_aliases = tuple(f"{a}, {caption.split(', ', 1)[1]}" for a in aliases)
            items.append(EmojiItem(image=variation["image"], caption=caption, skin_tones=tones, aliases=tone_aliases,
                                   **common))
    return items


def load_metadata(path: str | Path) -> list[dict[str, Any]]:
    """Read ``emoji.json`` (a list of entries with name, image, category, subcategory, skin_variations)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"emoji metadata not found: {path} (expected emoji.json from emoji-datasource 16.0.0)")
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of emoji entries, got {type(data).__name__}")
    return data
