"""Run configs: YAML checked against typed schemas, ``key=value`` overrides, the resolved config.

A run YAML has three top-level keys::

    task: image_ssl          # a registry key (pipelines/registry.py) or "module.path:Class"
    extends: base.yaml       # optional: a YAML (relative to this file) merged underneath
    run: {...}               # engine settings, schema :class:`RunSettings`
    config: {...}            # the task's section, schema ``TaskClass.config_class`` (a dataclass)

A config is named by its path, or by its place among the shipped configs from any folder
(``image_ssl/infonce`` is ``<package>/configs/image_ssl/infonce.yaml``; :func:`find_config`).

Both sections are OmegaConf structured configs, so an unknown key or a wrong type is a
:class:`ConfigError` naming the key and the file. Overrides are dotlists applied after the file,
with list indices as path parts (``config.objective.terms.0.name=weince``); a value is parsed as
YAML (``run.grad_clip=1.0``, ``config.objective.terms.1={name: dcl}``). Index ``len(list)`` appends;
a value given for a list item replaces it, a mapping given for a mapping is merged into it.

Files and override values are read by :func:`parse_yaml`: UTF-8 only, a key given twice in one mapping
and YAML anchors/aliases are errors (share settings with ``extends``).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass
import importlib.util
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from contrasuite.core.task.config_fields import bounded, check_fields, one_of
from contrasuite.pipelines.host_allocator import HOST_ALLOCATORS
from contrasuite.pipelines.memory_format import MEMORY_FORMATS
from contrasuite.pipelines.moved_keys import moved_key
from contrasuite.pipelines.registry import missing_extra, resolve_task

TOP_LEVEL_KEYS = ("task", "extends", "run", "config")
PRECISIONS = ("auto", "bf16", "fp16", "fp32")
DEVICES = ("auto", "cpu", "cuda")


class ConfigError(ValueError):
    """A config problem; the message names the file and the key."""


@dataclass
class RunSettings:
    """Engine settings (the ``run:`` section). Every default lives here, nowhere else."""

    seed: int = bounded(0, ge=0)
    precision: str = one_of("auto", PRECISIONS)
    """``auto`` (bf16 where the device computes it natively: a CUDA GPU with bf16 kernels, a CPU with
    AVX512-BF16 or AMX; fp32 elsewhere), ``bf16`` (autocast), ``fp16`` (autocast + GradScaler) or ``fp32``."""
    device: str = one_of("auto", DEVICES)
    """``auto`` (CUDA when present), ``cpu`` or ``cuda``."""
    memory_format: str = one_of("auto", MEMORY_FORMATS)
    """Layout of the 4-D weights of the task's networks (those it hands to ``ctx.wrap`` or ``ctx.lay_out``):
    ``auto`` (channels-last on the CPU for tasks that declare ``channels_last_on_cpu``, measured faster there; as
    built otherwise), ``channels_last`` or ``contiguous`` (``pipelines/memory_format.py``). Same network and numbers
    up to the kernels' rounding."""
    host_allocator: str = one_of("auto", HOST_ALLOCATORS)
    """Whether freed CPU memory stays in the process for the next step (``pipelines/host_allocator.py``): ``auto``
    (``retain`` on a CPU device under glibc), ``retain`` (no ``mmap`` per large tensor, no trimming: a step reuses
    the pages the last one freed instead of faulting in fresh ones; the process keeps its high-water mark) or
    ``system`` (the C library's defaults). Changes no number."""
    epochs: int = bounded(1, ge=0)
    """Epochs to run; 0 trains nothing and only validates (an untrained reference)."""
    max_steps: Optional[int] = bounded(None, ge=1)
    """Stop after this many optimisation steps in total (None: run all epochs)."""
    eval_every_epochs: int = bounded(1, ge=0)
    """Validate every N epochs (0: only at the end)."""
    log_every_steps: int = bounded(10, ge=0)
    checkpoint_every_steps: int = bounded(0, ge=0)
    """Also write ``last.pt`` every N steps inside an epoch (0: only at epoch ends and the end)."""
    best_metric: Optional[str] = None
    """Validation metric that selects ``best.pt`` (None: the first key ``evaluate("val")`` returns)."""
    best_mode: str = one_of("max", ("max", "min"))
    early_stop_patience: int = bounded(0, ge=0)
    """Stop training after this many validations in a row without a better ``run.best_metric`` (0: never; needs
    ``run.eval_every_epochs`` > 0). The run ends as finished; ``status.json`` says where it stopped."""
    deterministic: bool = False
    """``torch.use_deterministic_algorithms(True)`` and cuDNN benchmark off."""
    grad_clip: Optional[float] = bounded(None, gt=0)
    """Clip the global gradient norm of each optimizer's parameters to this value."""
    sync_batchnorm: bool = False
    """Under several CUDA processes, BatchNorm layers of the modules the task wraps normalise with the
    statistics of the global batch (``nn.SyncBatchNorm``); PyTorch's SyncBatchNorm has no CPU kernel."""
    dist_timeout_minutes: float = bounded(60.0, gt=0)
    """Longest wait of any collective, e.g. of ranks 1.. while rank 0 evaluates."""
    grad_clip_value: Optional[float] = bounded(None, gt=0)
    """Clip every gradient element to ``[-v, v]`` before the norm clip (EDSR-PyTorch's ``--gclip``)."""
    non_finite: str = one_of("stop", ("stop", "skip"))
    """What a non-finite loss or gradient does: ``stop`` (raise) or ``skip`` (drop the step)."""
    max_consecutive_skips: int = bounded(10, ge=0)
    """Under ``skip``: fail once more than this many steps in a row were skipped."""
    health_every_steps: int = bounded(50, ge=0)
    """Representation health (alignment, uniformity, gap, effective rank) every N steps (0: off)."""
    tensorboard: bool = False
    progress: bool = True
    output_root: str = "runs"
    data_root: Optional[str] = None
    """Data root; ``--data-root`` beats this, which beats ``$CONTRASUITE_DATA``, which beats ``data``."""
    name: Optional[str] = None
    """The run name (the folder below ``<output_root>/<domain>/``); None: the config's name, plus a digest of
    the ``config.*`` values the overrides changed (:func:`run_name`). Letters, digits, ``._-``; ``/`` nests."""
    resume: str = "never"
    """``never``, ``auto`` (continue the newest unfinished run of this run name and config) or a run folder."""
    eval_checkpoint: str = one_of("best", ("best", "last"))
    """Checkpoint ``contrasuite eval`` loads: ``best`` or ``last``."""


@dataclass
class LoadedConfig:
    """A validated config: the task class, typed sections and the resolved plain dict."""

    path: Path
    task_name: str
    task_class: type
    run: RunSettings
    config: Any
    resolved: dict
    name: str = ""
    """The run name (:func:`run_name`): ``run.name``, else ``reduced/meow_acm`` for
    ``configs/graph/reduced/meow_acm.yaml`` (the shipped path below the domain's folder; the file stem for any
    other file), with ``-<digest>`` when overrides changed the ``config:`` section. Run folders, status,
    plots and progress bars use it."""

    @property
    def stem(self) -> str:
        return self.path.stem

    @property
    def domain(self) -> str:
        """The run folder's domain part: the registry key, or the class name for ``module:Class``."""
        return self.task_name.rpartition(":")[2]


def config_root() -> Path:
    """The folder of the shipped configs (``configs/`` of a checkout, ``contrasuite/configs`` of a wheel).

    ``contrasuite.configs`` is a namespace package (YAML only, no ``__init__.py``): its first real folder."""
    spec = importlib.util.find_spec("contrasuite.configs")
    folders = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    found = next((f for f in folders if f.is_dir()), None)
    if found is None:
        raise ConfigError("the shipped configs (package contrasuite.configs) are not installed")
    return found


FRAGMENT_FOLDERS = ("base", "datasets")
"""Folders of shipped YAML that run configs extend (a dataset description, a shared base), not run configs."""


def default_data_root() -> str:
    """The data root when neither ``--data-root`` nor ``run.data_root`` gives one: ``$CONTRASUITE_DATA``, else ``data``."""
    return os.environ.get("CONTRASUITE_DATA", "data")


def shipped_configs() -> list[Path]:
    """Every shipped config file, sorted."""
    return sorted(config_root().rglob("*.yaml"))


def is_fragment(path: Path) -> bool:
    """Whether a shipped config file is a fragment that run configs extend (under :data:`FRAGMENT_FOLDERS`)."""
    return any(part in FRAGMENT_FOLDERS for part in path.relative_to(config_root()).parts[:-1])


def find_config(name: str | os.PathLike) -> Path:
    """A config file: ``name`` if it exists, else the shipped config it names (``image_ssl/infonce``).

    Unknown names fail with the closest shipped names."""
    path = Path(name)
    if path.is_file():
        return path
    root = config_root()
    shipped = root / (path if path.suffix == ".yaml" else path.with_name(path.name + ".yaml"))
    if not path.is_absolute() and shipped.is_file():
        return shipped
    names = [str(p.relative_to(root).with_suffix("")) for p in shipped_configs()]
    close = difflib.get_close_matches(str(path.with_suffix("")), names, n=3, cutoff=0.5)
    hint = f"; shipped configs like it: {close}" if close else f"; shipped configs are under {root}"
    raise ConfigError(f"config file not found: {path}{hint}")


class _RefusedYaml(yaml.MarkedYAMLError):
    """YAML a run config may not use; ``problem_mark`` is where."""


class _RunConfigLoader(yaml.SafeLoader):
    """A SafeLoader that refuses what silently changes or explodes a run config: a key given twice in one
    mapping (the last value would win) and anchors or aliases (nested aliases expand exponentially, a
    "billion laughs" file). No shipped config uses anchors; a config shares values through ``extends``."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise _RefusedYaml(problem=f"YAML alias '*{event.anchor}' is not allowed in a run config "
                               "(aliases can expand exponentially; share settings with 'extends: other.yaml')",
                               problem_mark=event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise _RefusedYaml(problem=f"YAML anchor '&{event.anchor}' is not allowed in a run config "
                               "(share settings with 'extends: other.yaml')", problem_mark=event.start_mark)
        return super().compose_node(parent, index)

    def construct_document(self, node: yaml.Node) -> Any:
        _check_unique_keys(node, "")
        return super().construct_document(node)


def _check_unique_keys(node: yaml.Node, where: str) -> None:
    """Refuse a key given twice in one mapping anywhere in ``node``; ``where`` is its dotted key."""
    children: list[tuple[str, yaml.Node]] = []
    if isinstance(node, yaml.SequenceNode):
        children = [(f"{where}.{i}" if where else str(i), item) for i, item in enumerate(node.value)]
    elif isinstance(node, yaml.MappingNode):
        first_line: dict[tuple[str, str], int] = {}
        for key, value in node.value:
            if key.tag == "tag:yaml.org,2002:merge" or not isinstance(key, yaml.ScalarNode):
                children.append((where, value))  # a merge key's mappings (or an odd key) have no name of their own
                continue
            dotted = f"{where}.{key.value}" if where else str(key.value)
            if (key.tag, key.value) in first_line:
                raise _RefusedYaml(problem=f"key {dotted!r} is given twice in the same mapping (first at line "
                                   f"{first_line[key.tag, key.value]}); the later value would silently win: keep one",
                                   problem_mark=key.start_mark)
            first_line[key.tag, key.value] = key.start_mark.line + 1
            children.append((dotted, value))
    for dotted, child in children:
        _check_unique_keys(child, dotted)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A PyYAML error as ``line L, column C: problem (context at line L)``, without the quoted snippet."""
    mark, problem = getattr(err, "problem_mark", None), getattr(err, "problem", None)
    if mark is None or problem is None:
        return " ".join(str(err).split())
    context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
    where = f" at line {context_mark.line + 1}" if context_mark is not None else ""
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" + (f" ({context}{where})" if context else "")


def parse_yaml(text: str, source: str) -> Any:
    """``text`` as one YAML document, read by :class:`_RunConfigLoader`; a problem is a :class:`ConfigError`
    that starts with ``source`` (a file, an override) and names the line."""
    try:
        return _load_document(text, source)
    except _RefusedYaml as err:
        raise ConfigError(f"{source}: line {err.problem_mark.line + 1}: {err.problem}") from None
    except yaml.reader.ReaderError as err:
        line = text[: err.position].count("\n") + 1
        raise ConfigError(f"{source}: not valid YAML: line {line}: character #x{err.character:04X} "
                          f"is not allowed ({err.reason})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: not valid YAML: {_yaml_problem(err)}") from None
    except RecursionError:
        raise ConfigError(f"{source}: not valid YAML: nested too deeply") from None


def _load_document(text: str, source: str) -> Any:
    loader = _RunConfigLoader(text)
    loader.name = source
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _read_text(path: Path) -> str:
    """The text of a config file; a missing, unreadable or non-UTF-8 file is a :class:`ConfigError` naming it."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file: {err.strerror or err}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{raw[err.start]:02x} at line {line}); "
                          "save the file as UTF-8") from None


def _read_yaml(path: Path) -> dict:
    """One run-config file (no ``extends`` merging): a mapping of the top-level keys."""
    data = parse_yaml(_read_text(path), str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a run config is a mapping with keys {TOP_LEVEL_KEYS}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(TOP_LEVEL_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key {unknown[0]!r}; allowed: {TOP_LEVEL_KEYS}")
    return data


def _deep_merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        out[key] = _deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def read_raw(path: Path, _seen: tuple[Path, ...] = ()) -> dict:
    """The YAML at ``path`` with its ``extends`` chain merged underneath (a later file wins)."""
    path = Path(path).resolve()
    if path in _seen:
        raise ConfigError(f"{path}: 'extends' cycle through {[str(p) for p in _seen]}")
    data = _read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    return _deep_merge(read_raw(path.parent / str(parent), (*_seen, path)), data)


def _structured(schema: type, values: Any, section: str, path: Path) -> DictConfig:
    if not dataclasses.is_dataclass(schema):
        raise ConfigError(f"{path}: the schema of section {section!r} must be a dataclass, got {schema!r}")
    if values is not None and not isinstance(values, dict):
        raise ConfigError(f"{path}: section {section!r} must be a mapping, got {type(values).__name__}")
    node = OmegaConf.structured(schema)
    try:
        return OmegaConf.merge(node, values or {})
    except OmegaConfBaseException as err:
        raise ConfigError(f"{path}: {section}.{_key_of(err)}: {_first_line(err)}") from None


def _key_of(err: OmegaConfBaseException) -> str:
    return str(getattr(err, "full_key", None) or "?")


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0]


def parse_override(item: str) -> tuple[str, Any]:
    """``"a.b.0.c=value"`` -> ``("a.b.0.c", yaml-parsed value)``."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {item!r} is not key=value")
    value = parse_yaml(raw, f"override {item!r}") if raw.strip() else ""
    return key.strip(), value


def apply_override(root: DictConfig, key: str, value: Any, path: Path) -> None:
    """Set ``key`` (dotted, list indices as parts) in ``root``; unknown keys and wrong types fail."""
    parts = key.split(".")
    parent_key, last = ".".join(parts[:-1]), parts[-1]
    parent = OmegaConf.select(root, parent_key, throw_on_missing=False) if parent_key else root
    if parent is None:
        raise ConfigError(f"{path}: override {key}: no key {parent_key!r} in the config")
    try:
        if isinstance(parent, ListConfig) and not last.isdigit():
            raise ConfigError(f"{path}: override {key}: {parent_key!r} is a list; index it with a number")
        if isinstance(parent, ListConfig) and int(last) == len(parent):
            parent.append(value)
        elif isinstance(parent, DictConfig) and last not in parent:
            raise ConfigError(f"{path}: override {key}: unknown key {last!r} (known: {sorted(parent.keys())})")
        elif isinstance(parent, ListConfig):
            parent[int(last)] = value  # a list item (e.g. an objective term) is replaced, not merged
        else:
            OmegaConf.update(root, key, value, merge=True)
    except OmegaConfBaseException as err:
        raise ConfigError(f"{path}: override {key}: {_first_line(err)}") from None


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*")
"""A run name: folder names of letters, digits and ``._-`` (not starting with ``.`` or ``-``), joined by ``/``."""


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": [1, 2]}}`` -> ``{"a.b.0": 1, "a.b.1": 2}`` (empty containers kept as leaves)."""
    if isinstance(tree, dict):
        items = list(tree.items())
    elif isinstance(tree, list):
        items = list(enumerate(tree))
    else:
        items = []
    if not items:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def overrides_digest(before: dict, after: dict) -> str | None:
    """8 hex digits naming how ``after`` (the ``config:`` section with the overrides) differs from ``before``
    (the file's), None when it does not: the same changes give the same digest, whatever their order or spelling."""
    old, new = flatten(before), flatten(after)
    changed = {k: new.get(k, "<absent>") for k in sorted(set(old) | set(new))
               if old.get(k, "<absent>") != new.get(k, "<absent>")}
    if not changed:
        return None
    return hashlib.sha256(json.dumps(changed, sort_keys=True, default=str).encode()).hexdigest()[:8]


def run_name(path: Path, domain: str, digest: str | None = None) -> str:
    """``reduced/meow_acm`` for a shipped ``graph/reduced/meow_acm.yaml`` of domain ``graph``, else the stem;
    ``-<digest>`` appended when overrides changed the config (:func:`overrides_digest`)."""
    return _config_name(path, domain) + (f"-{digest}" if digest else "")


def _config_name(path: Path, domain: str) -> str:
    try:
        rel = path.resolve().relative_to(config_root().resolve()).with_suffix("")
    except (ValueError, ConfigError):
        return path.stem
    parts = rel.parts[1:] if len(rel.parts) > 1 and rel.parts[0] == domain else rel.parts
    return "/".join(parts)


def load_config(path: str | os.PathLike, overrides: Sequence[str] = (), data_root: str | None = None,
                name: str | None = None) -> LoadedConfig:
    """Read, merge, override and validate a run config; ``data_root`` (the CLI flag) wins over the file.

    ``path`` is a file or a shipped config's name (:func:`find_config`); ``name`` overrides the run name
    (a resumed run keeps the one its folder was made under)."""
    path = find_config(path)
    raw = read_raw(path)
    parsed = [parse_override(o) for o in overrides]
    task_name = next((v for k, v in parsed if k == "task"), raw.get("task"))
    if not task_name:
        raise ConfigError(f"{path}: missing top-level key 'task' (a registry key or 'module:Class')")
    try:
        task_class = resolve_task(str(task_name))
    except ModuleNotFoundError as err:
        raise ConfigError(f"{path}: task {task_name!r}: {missing_extra(err) or err}") from None
    except (KeyError, ImportError, AttributeError) as err:
        raise ConfigError(f"{path}: task: {err}") from None
    schema = getattr(task_class, "config_class", None)
    if schema is None:
        raise ConfigError(f"{path}: task {task_name!r} ({task_class.__name__}) has no config_class dataclass")
    _refuse_moved_keys(str(task_name), raw, parsed, path)
    root = OmegaConf.create({"task": str(task_name)})
    root.run = _structured(RunSettings, raw.get("run"), "run", path)
    root.config = _structured(schema, raw.get("config"), "config", path)
    from_file = OmegaConf.to_container(root.config)  # unresolved: run.epochs=5 changes ${run.epochs}, not the name
    for key, value in parsed:
        if key != "task":
            apply_override(root, key, value, path)
    if data_root is not None:
        root.run.data_root = str(data_root)
    elif root.run.data_root is None:
        root.run.data_root = default_data_root()
    digest = overrides_digest(from_file, OmegaConf.to_container(root.config))
    try:
        resolved = OmegaConf.to_container(root, resolve=True)
        run = OmegaConf.to_object(root.run)
        config = OmegaConf.to_object(root.config)
    except OmegaConfBaseException as err:
        raise ConfigError(f"{path}: {_key_of(err)}: {_first_line(err)}") from None
    try:
        check_fields(run, "run")
        check_fields(config, "config")
    except ValueError as err:
        raise ConfigError(f"{path}: {err}") from None
    _check_objective_terms(resolved["config"], path, getattr(task_class, "extra_objectives", None))
    if run.early_stop_patience and not run.eval_every_epochs:
        raise ConfigError(f"{path}: run.early_stop_patience={run.early_stop_patience} needs validations during "
                          "training: set run.eval_every_epochs > 0")
    if run.name is not None and not SAFE_NAME.fullmatch(run.name):
        raise ConfigError(f"{path}: run.name: {run.name!r} is not a safe folder name (letters, digits and ._- , "
                          "not starting with . or -; / between folder names)")
    loaded = LoadedConfig(path, str(task_name), task_class, run, config, resolved)
    loaded.name = name or run.name or run_name(path, loaded.domain, digest)
    return loaded


def _refuse_moved_keys(task: str, raw: dict, overrides: Sequence[tuple[str, Any]], path: Path) -> None:
    """A :class:`ConfigError` naming the new key when the file or an override uses a key that moved (:mod:`moved_keys`)."""
    problem = moved_key(task, "config", raw.get("config"))
    if problem:
        raise ConfigError(f"{path}: {problem}")
    for key, value in overrides:
        problem = moved_key(task, key, value)
        if problem:
            raise ConfigError(f"{path}: override {key}: {problem}")


def _check_objective_terms(section: Any, path: Path, extra: Any = None, where: str = "config") -> None:
    """Build every ``objective: {terms: [...]}`` found in the task section, so typos fail at load time.

    ``extra`` is the task class's ``extra_objectives`` (its own term names), if it declares any.
    """
    if isinstance(section, dict):
        for key, value in section.items():
            if key == "objective" and isinstance(value, dict) and "terms" in value:
                from contrasuite.core.objectives import ObjectiveSum

                try:
                    ObjectiveSum(value["terms"], extra)
                except (ValueError, TypeError) as err:
                    raise ConfigError(f"{path}: {where}.objective.terms: {err}") from None
            else:
                _check_objective_terms(value, path, extra, f"{where}.{key}")


class _PlainDumper(yaml.SafeDumper):
    """Writes a value shared by two keys twice, never as an anchor and alias (which the reader refuses)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def save_resolved(resolved: dict, path: Path) -> None:
    """Write the resolved config as YAML (atomically)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.dump(resolved, Dumper=_PlainDumper, sort_keys=False))
    os.replace(tmp, path)
