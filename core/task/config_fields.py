"""Ranges and choices declared on config dataclass fields, checked when a config is loaded.

``batch_size: int = bounded(256, gt=0)`` or ``name: str = one_of("sgd", OPTIMIZERS)`` keep the
default and record the rule in the field's metadata; :func:`check_fields` walks a built config (nested
dataclasses, lists of numbers) and raises ``ValueError`` naming the dotted key, so ``validate-configs``
and ``train`` refuse ``config.batch_size=0`` before any data is read. ``None`` passes (an unset optional).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable

from contrasuite.core.task.errors import ConfigValueError

_OPS = {"ge": (">=", lambda v, b: v >= b), "gt": (">", lambda v, b: v > b),
        "le": ("<=", lambda v, b: v <= b), "lt": ("<", lambda v, b: v < b)}


def bounded(default: Any, **limits: float) -> Any:
    """A field with numeric limits (``ge``, ``gt``, ``le``, ``lt``); applies to each item of a list."""
    unknown = set(limits) - set(_OPS)
    if unknown:
        raise TypeError(f"bounded(): unknown limit {sorted(unknown)}; use {sorted(_OPS)}")
    return dataclasses.field(default=default, metadata={"limits": limits})


def one_of(default: Any, choices: Iterable[Any]) -> Any:
    """A field whose value must be one of ``choices`` (e.g. a registry's keys)."""
    return dataclasses.field(default=default, metadata={"choices": tuple(choices)})


def _check_value(key: str, value: Any, meta: Any) -> None:
    if value is None:
        return
    if "choices" in meta and value not in meta["choices"]:
        raise ConfigValueError(f"{key}: {value!r} is not one of {list(meta['choices'])}")
    for op, bound in meta.get("limits", {}).items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            symbol, ok = _OPS[op]
            if not ok(item, bound):
                raise ConfigValueError(f"{key}: must be {symbol} {bound}, got {item!r}")


def check_fields(obj: Any, prefix: str) -> None:
    """Check every declared range and choice in ``obj`` and its nested dataclasses (also the values of a mapping,
    ``config.optim.groups.head``); errors name the key."""
    if not dataclasses.is_dataclass(obj):
        return
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), f"{prefix}.{f.name}"
        _check_value(key, value, f.metadata)
        check_fields(value, key)
        if isinstance(value, dict):
            for name, item in value.items():
                check_fields(item, f"{key}.{name}")


@dataclass
class ObjectiveConfig:
    """``config.objective``: the loss terms, each ``{name: <registered objective>, weight: w, <parameter>: value}``
    (:class:`contrasuite.core.objectives.ObjectiveSum`). A domain with more to say about its objective
    (image_ssl's views, graph's anchor) extends this class by those fields and its own default terms."""

    terms: list[Any] = field(default_factory=list)


def objective_field(*terms: dict[str, Any]) -> Any:
    """A domain config's ``objective`` field: an :class:`ObjectiveConfig` whose default terms are ``terms``."""
    return field(default_factory=lambda: ObjectiveConfig(terms=[dict(t) for t in terms]))
