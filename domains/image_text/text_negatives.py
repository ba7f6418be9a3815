"""Hard-negative captions by meaning-changing edits, each recording its operation.

Operations (after SugarCrepe's taxonomy, Hsieh et al., NeurIPS 2023, and NegCLIP, Yuksekgonul et al.,
ICLR 2023): ``replace_colour``, ``replace_skin_tone``, ``replace_gender`` (replace an attribute),
``swap_attributes`` (two attributes bound to different things trade places), ``replace_object``,
``change_direction`` (left/right, up/down: the mirror image), ``change_relation`` (above/below,
with/without, ...), ``change_number``. On emoji the metadata says which words are which attribute
(skin tones come from the variation code, not from parsing); free text uses the offline word lists
in :mod:`contrasuite.domains.image_text.captions`. A negative that could still be a true description
of the image (a false negative) is dropped by :func:`is_false_negative`.

A direction or colour edit also records how to realise it on the image (``edit``: a flip, or a hue
rotation between two named colours), so the image editor can make the matching negative image.
Other generators (a local language model) plug in through :class:`TextNegativeGenerator`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from contrasuite.domains.image_text.captions import (
    COLOURS, DIGITS, DIRECTION_PAIRS, FLAG_SUBCATEGORIES, GENDER_PAIRS, HORIZONTAL, NUMBERS, RELATION_PAIRS,
    SKIN_TONES, TYPOGRAPHIC_SUBCATEGORIES, VERTICAL, EmojiItem, normalise, word_pattern,
)

OPERATIONS = ("replace_colour", "replace_skin_tone", "replace_gender", "swap_attributes", "replace_object",
              "change_direction", "change_relation", "change_number")

OBJECT_WORDS = ("person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat", "bench",
                "bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack",
                "umbrella", "handbag", "tie", "suitcase", "frisbee", "kite", "skateboard", "surfboard", "bottle",
                "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange", "broccoli",
                "carrot", "pizza", "donut", "cake", "chair", "couch", "bed", "table", "toilet", "laptop", "mouse",
                "keyboard", "phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock",
                "vase", "scissors", "teddy bear", "hair drier", "toothbrush")
"""Offline object words for free text (the 80 COCO classes, singular, minus colour clashes kept)."""

_TONE_NAMES = tuple(SKIN_TONES.values())
_GENDER = {a: b for x, y in GENDER_PAIRS for a, b in ((x, y), (y, x))}
_MIRROR = {a: b for x, y in DIRECTION_PAIRS for a, b in ((x, y), (y, x))}
_RELATION = {a: b for x, y in RELATION_PAIRS for a, b in ((x, y), (y, x))}
_ROTATION = frozenset({"clockwise", "anticlockwise"})
_HYPERNYMS = frozenset({"person", "people", "adult", "child"})
NON_SPATIAL = ("left luggage", "page facing up")
"""Captions whose direction word is no direction on the picture (luggage left behind, a page face up)."""


@dataclass(frozen=True)
class TextNegative:
    """A negative caption, the operation that made it, and how to realise it on the image (if known)."""

    text: str
    operation: str
    edit: dict[str, Any] | None = None
    """``{"flip": "horizontal"|"vertical"}`` or ``{"hue": [from_colour, to_colour]}``; ``None``: text only."""


def _split_tones(caption: str) -> tuple[str, str]:
    """``"woman raising hand, dark skin tone"`` -> (``"woman raising hand"``, ``", dark skin tone"``)."""
    for tone in _TONE_NAMES:
        idx = caption.find(", " + tone)
        if idx >= 0:
            return caption[:idx], caption[idx:]
    return caption, ""


_COLOUR_RE = word_pattern(COLOURS)
_GENDER_RE = word_pattern(list(_GENDER))
_DIRECTION_RE = word_pattern(list(_MIRROR), after=r"(?!\w)(?!-(?!pointing|facing))")
"""Direction words, also in ``left-pointing`` and ``right-facing`` (not in ``rolled-up``, ``upside-down``)."""
_RELATION_RE = word_pattern(list(_RELATION))
_NUMBER_RE = word_pattern(NUMBERS + DIGITS)
_TONE_RE = word_pattern(_TONE_NAMES)


def _replace_at(text: str, match: re.Match, new: str) -> str:
    return text[: match.start()] + new + text[match.end():]


def replace_colour(caption: str, item: EmojiItem | None, rng: random.Random, k: int) -> list[TextNegative]:
    head, tail = _split_tones(caption)
    out = []
    for match in _COLOUR_RE.finditer(head):
        colour = match.group(1)
        if colour in ("black", "white") and item is not None and item.subcategory.startswith(TYPOGRAPHIC_SUBCATEGORIES):
            continue  # Unicode's BLACK/WHITE here name a filled/outlined glyph, not the rendered colour
        # skin hues overlap red, orange and yellow hair: a hue rotation cannot recolour only the hair
        edit = item is None or not item.skin_tones
        for new in rng.sample([c for c in COLOURS if c != colour], k=min(k, len(COLOURS) - 1)):
            out.append(TextNegative(_replace_at(head, match, new) + tail, "replace_colour",
                                    {"hue": [colour, new]} if edit else None))
    return out[:k]


def replace_skin_tone(caption: str, item: EmojiItem | None, rng: random.Random, k: int) -> list[TextNegative]:
    head, tail = _split_tones(caption)
    matches = list(_TONE_RE.finditer(tail))
    if not matches:
        return []
    out = []
    for new in rng.sample(_TONE_NAMES, k=len(_TONE_NAMES)):
        match = matches[rng.randrange(len(matches))]
        if new != match.group(1):
            out.append(TextNegative(head + _replace_at(tail, match, new), "replace_skin_tone"))
    return out[:k]


def _swap_words(caption: str, pattern: re.Pattern, partner: Mapping[str, str], operation: str, rng: random.Random,
                k: int) -> list[TextNegative]:
    """Each word of ``pattern`` in the caption (its skin tones aside) replaced by its ``partner``, one negative a
    word; ``k`` of them drawn at random."""
    head, tail = _split_tones(caption)
    out = [TextNegative(_replace_at(head, m, partner[m.group(1)]) + tail, operation) for m in pattern.finditer(head)]
    return rng.sample(out, k=min(k, len(out)))


def replace_gender(caption: str, item: EmojiItem | None, rng: random.Random, k: int) -> list[TextNegative]:
    return _swap_words(caption, _GENDER_RE, _GENDER, "replace_gender", rng, k)


def swap_attributes(caption: str, item: EmojiItem | None, rng: random.Random, k: int) -> list[TextNegative]:
    """Two different skin tones of two people, or two colours of two different objects, trade places."""
    out = []
    head, tail = _split_tones(caption)
    tones = list(_TONE_RE.finditer(tail))
    if len(tones) >= 2 and tones[0].group(1) != tones[1].group(1):
        a, b = tones[0], tones[1]
        swapped = tail[: a.start()] + b.group(1) + tail[a.end(): b.start()] + a.group(1) + tail[b.end():]
        out.append(TextNegative(head + swapped, "swap_attributes"))
    colours = list(_COLOUR_RE.finditer(head))
    if len(colours) >= 2 and colours[0].group(1) != colours[1].group(1):
        a, b = colours[0], colours[1]
        after_a = head[a.end(): b.start()].split()
        after_b = head[b.end():].split()
        if after_a and after_b and after_a[0] not in ("and", "or") and after_a[0] != after_b[0]:  # bound to different words
            swapped = head[: a.start()] + b.group(1) + head[a.end(): b.start()] + a.group(1) + head[b.end():]
            out.append(TextNegative(swapped + tail, "swap_attributes"))
    return out[:k]


def replace_object(caption: str, item: EmojiItem | None, rng: random.Random, k: int,
                   vocabulary: Sequence[str] | Mapping[str, Sequence[str]] = OBJECT_WORDS) -> list[TextNegative]:
    """Replace the head noun (emoji: the name's last word) or any vocabulary word (free text).

    ``vocabulary`` may map an emoji category to its own words (objects replaced within a category).
    """
    if isinstance(vocabulary, Mapping):
        vocabulary = vocabulary.get(item.category, ()) if item is not None else OBJECT_WORDS
    head, tail = _split_tones(caption)
    words = head.split(" ")
    if item is not None:
        positions = [len(words) - 1]
    else:
        positions = [i for i, w in enumerate(words) if w in vocabulary]
    attribute_words = set(COLOURS) | set(_GENDER) | set(_MIRROR) | set(NUMBERS) | set(DIGITS) | set(_RELATION)
    out = []
    for pos in positions:
        if words[pos] in attribute_words or not words[pos].isalpha():
            continue
        for new in rng.sample(list(vocabulary), k=min(k + 1, len(vocabulary))):
            if new != words[pos]:
                out.append(TextNegative(" ".join(words[:pos] + [new] + words[pos + 1:]) + tail, "replace_object"))
    return out[:k]


def change_direction(caption: str, item: EmojiItem | None, rng: random.Random, k: int) -> list[TextNegative]:
    """The caption of the mirror image: every horizontal (or vertical) direction word flipped.

    Flags (``south korea``) and :data:`NON_SPATIAL` captions name no direction on the picture: none."""
    head, tail = _split_tones(caption)
    if head in NON_SPATIAL or (item is not None and item.subcategory in FLAG_SUBCATEGORIES):
        return []
    out = []
    for axis, words in (("horizontal", HORIZONTAL), ("vertical", VERTICAL)):
        found = [m for m in _DIRECTION_RE.finditer(head) if m.group(1) in words]
        if not found:
            continue
        flipped = _DIRECTION_RE.sub(lambda m: _MIRROR[m.group(1)] if m.group(1) in words | _ROTATION else m.group(1),
                                    head)
        out.append(TextNegative(flipped + tail, "change_direction", {"flip": axis}))
    return out[:k]


def change_relation(caption: str, item: EmojiItem | None, rng: random.Random, k: int) -> list[TextNegative]:
    return _swap_words(caption, _RELATION_RE, _RELATION, "change_relation", rng, k)


def change_number(caption: str, item: EmojiItem | None, rng: random.Random, k: int) -> list[TextNegative]:
    head, tail = _split_tones(caption)
    out = []
    for match in _NUMBER_RE.finditer(head):
        pool = DIGITS if match.group(1) in DIGITS else NUMBERS
        for new in rng.sample([n for n in pool if n != match.group(1)], k=k):
            out.append(TextNegative(_replace_at(head, match, new) + tail, "change_number"))
    return out[:k]


RULES: dict[str, Callable[..., list[TextNegative]]] = {
    "replace_colour": replace_colour, "replace_skin_tone": replace_skin_tone, "replace_gender": replace_gender,
    "swap_attributes": swap_attributes, "replace_object": replace_object, "change_direction": change_direction,
    "change_relation": change_relation, "change_number": change_number,
}


def is_false_negative(negative: TextNegative, true_texts: Sequence[str]) -> bool:
    """True if ``negative`` could describe the image: equal (normalised) to a true text, a reordering
    of one (``"left right arrow"`` vs ``"right left arrow"``, ``"man and woman"`` vs ``"woman and man"``)
    unless the reordering moves a bound attribute (``swap_attributes``), or a gender word replaced by
    a hypernym (``person``)."""
    neg = normalise(negative.text)
    truths = [normalise(t) for t in true_texts]
    if neg in truths:
        return True
    if negative.operation != "swap_attributes" and any(sorted(neg.split()) == sorted(t.split()) for t in truths):
        return True
    if negative.operation == "replace_gender":
        changed = set(neg.split()) - {w for t in truths for w in t.split()}
        return bool(changed & _HYPERNYMS)
    return False


class TextNegativeGenerator(Protocol):
    """Anything that proposes negatives for a caption (rules, a local language model)."""

    def __call__(self, caption: str, item: EmojiItem | None, rng: random.Random) -> list[TextNegative]: ...


@dataclass
class RuleGenerator:
    """The word-list rules above: up to ``per_operation`` negatives from each of ``operations``."""

    operations: Sequence[str] = OPERATIONS
    per_operation: int = 2
    object_vocabulary: Sequence[str] | Mapping[str, Sequence[str]] = field(default=OBJECT_WORDS)

    def __post_init__(self) -> None:
        unknown = set(self.operations) - set(RULES)
        if unknown:
            raise ValueError(f"unknown negative operation(s) {sorted(unknown)}; known: {list(RULES)}")
        if self.per_operation < 1:
            raise ValueError(f"per_operation must be >= 1, got {self.per_operation}")

    def __call__(self, caption: str, item: EmojiItem | None, rng: random.Random) -> list[TextNegative]:
        out = []
        for op in self.operations:
            if op == "replace_object":
                out += replace_object(caption, item, rng, self.per_operation, self.object_vocabulary)
            else:
                out += RULES[op](caption, item, rng, self.per_operation)
        return out


@dataclass
class LanguageModelGenerator:
    """Negatives from a local language model: ``complete(prompt) -> str``, one negative per output line.

    ``complete`` is any callable (a ``transformers`` text-generation pipeline loaded from a local path
    with :meth:`from_pretrained`, or a stub in tests). Its proposals carry ``operation``; the usual
    false-negative filter still applies.
    """

    complete: Callable[[str], str]
    prompt: str = ("Rewrite the caption so that it no longer matches the image by changing one attribute, "
                   "object, relation, direction or number. Give {k} rewrites, one per line.\nCaption: {caption}\n")
    k: int = 3
    operation: str = "language_model"

    @classmethod
    def from_pretrained(cls, path: str, max_new_tokens: int = 64, **kwargs: Any) -> "LanguageModelGenerator":
        from transformers import pipeline

        generator = pipeline("text-generation", model=path, device_map=None)

        def complete(prompt: str) -> str:
            text = generator(prompt, max_new_tokens=max_new_tokens, do_sample=False)[0]["generated_text"]
            return text[len(prompt):]

        return cls(complete=complete, **kwargs)

    def __call__(self, caption: str, item: EmojiItem | None, rng: random.Random) -> list[TextNegative]:
        lines = self.complete(self.prompt.format(k=self.k, caption=caption)).splitlines()
        texts = [re.sub(r"^\s*(\d+[.)]|-)\s*", "", line).strip() for line in lines]
        return [TextNegative(t, self.operation) for t in texts if t][: self.k]


def generate_text_negatives(caption: str, item: EmojiItem | None, generators: Sequence[TextNegativeGenerator],
                            rng: random.Random, true_texts: Sequence[str] = ()) -> list[TextNegative]:
    """Every generator's proposals for ``caption``, de-duplicated, false negatives removed."""
    truths = [caption, *true_texts, *(item.aliases if item is not None else ())]
    seen, out = set(), []
    for generate in generators:
        for neg in generate(caption, item, rng):
            key = normalise(neg.text)
            if key not in seen and not is_false_negative(neg, truths):
                seen.add(key)
                out.append(neg)
    return out
