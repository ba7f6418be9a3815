"""GraphTask end to end through the engine: every shipped config on a tiny graph, and a new dataset
described only by a YAML file (no code change)."""

import json
from pathlib import Path

import pytest
import yaml

import contrasuite.domains.graph.report as report
from contrasuite.core.objectives import OBJECTIVES
from contrasuite.pipelines.config import load_config
from contrasuite.pipelines.trainer import evaluate, train

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "graph"
SHIPPED = sorted(CONFIGS.glob("*.yaml"))
REDUCED = sorted((CONFIGS / "reduced").glob("*.yaml"))


def tiny_overrides(dataset: dict, out: Path, epochs: int = 2) -> list[str]:
    """Point a config at the tiny graph and shrink the schedule and the probe."""
    return [
        f"config.dataset={json.dumps(dataset)}",
        "config.eval_ratios=[5]",
        "config.probe.runs=2",
        "config.probe.iterations=10",
        "config.probe.cluster_runs=2",
        "config.val_probe_runs=2",
        f"run.epochs={epochs}",
        f"run.eval_every_epochs={epochs}",
        "run.health_every_steps=2",
        "run.log_every_steps=1",
        "run.progress=false",
        f"run.output_root={out}",
    ]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_shipped_config_runs_on_a_tiny_graph(path, tmp_path, make_tiny_graph):
    resolved = load_config(path).resolved["config"]  # its `extends` chain merged
    for term in resolved["objective"]["terms"]:
        if term["name"] not in OBJECTIVES:
            pytest.skip(f"objective {term['name']!r} is not registered in contrasuite.core yet")
    dataset = make_tiny_graph(tmp_path / "tiny", len(resolved["dataset"]["metapaths"]))
    overrides = tiny_overrides(dataset, tmp_path / "runs")
    if resolved["negatives"]["kind"] == "cluster":
        overrides.append("config.negatives.num_clusters=[4, 7]")
    loaded = load_config(path, overrides)
    run_dir = train(loaded)
    result = evaluate(run_dir)
    metrics = result["metrics"]
    assert {"macro_f1_5", "micro_f1_5", "auc_5", "nmi", "ari"} <= set(metrics)
    assert 0 <= metrics["macro_f1_5"] <= 100 and 0 <= metrics["auc_5"] <= 100
    losses = [line for line in (run_dir / "metrics.csv").read_text().splitlines() if ",train/loss," in line]
    assert len(losses) >= 1


def test_reduced_configs_keep_the_method_of_their_full_config():
    paper_only = {f"{m}_{d}.yaml" for m, datasets in report.CONTROLS.items() for d in datasets}
    assert len(REDUCED) == 12 and {p.name for p in REDUCED} == {p.name for p in SHIPPED} - paper_only
    for path in REDUCED:
        reduced, full = load_config(path), load_config(CONFIGS / path.name)
        assert reduced.config.objective == full.config.objective
        assert reduced.config.model == full.config.model and reduced.config.dataset == full.config.dataset
        assert reduced.config.negatives.kind == full.config.negatives.kind
        assert reduced.run.epochs < full.run.epochs


def test_new_dataset_by_yaml_only(tmp_path, make_tiny_graph):
    """A dataset with new node types, edge files and meta-paths runs from a YAML file alone."""
    dataset = make_tiny_graph(tmp_path / "shop", num_metapaths=2)
    config = {
        "task": "graph",
        "run": {"seed": 1, "precision": "fp32", "epochs": 4, "eval_every_epochs": 2, "progress": False,
                "output_root": str(tmp_path / "runs"), "health_every_steps": 0},
        "config": {
            "dataset": dataset,
            "eval_ratios": [5],
            "model": {"dim": 16, "adj_mask": [0.2, 0.2], "nei_max": [10, 10]},
            "negatives": {"kind": "cluster", "num_clusters": [3, 6], "proto_weight": 1.0, "proto_temperature": 0.5},
            "objective": {"terms": [{"name": "infonce", "temperature": 0.5, "positive_in_denominator": False}]},
            "optim": {"lr": 0.005},
            "probe": {"lr": 0.05, "iterations": 50, "runs": 3, "cluster_runs": 2},
        },
    }
    path = tmp_path / "shop.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = train(load_config(path))
    metrics = evaluate(run_dir)["metrics"]
    # the tiny graph's edges follow the classes, so the embedding beats chance (33%) clearly
    assert metrics["macro_f1_5"] > 50, metrics


def test_config_errors_name_the_key(tmp_path, make_tiny_graph):
    from contrasuite.domains.graph.task import GraphConfig, GraphTask
    from contrasuite.core.task.protocol import TaskContext
    import torch

    dataset = make_tiny_graph(tmp_path / "t", 2)
    cfg = load_config(CONFIGS / "meow_acm.yaml", [f"config.dataset={json.dumps(dataset)}", "config.eval_ratios=[5]",
                                                   "config.model.nei_max=[3, 3, 3]"]).config
    assert isinstance(cfg, GraphConfig)
    with pytest.raises(ValueError, match="config.model.nei_max"):
        GraphTask().setup(TaskContext(cfg, torch.device("cpu"), "fp32", tmp_path, tmp_path, 0))
