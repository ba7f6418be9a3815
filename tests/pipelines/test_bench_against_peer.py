"""pipelines/bench/against_peer.py: alternating timed rounds, the ratios, the equal-work check and the page sections."""

import json
from types import SimpleNamespace

import pytest

from contrasuite.pipelines.bench import against_peer
from contrasuite.pipelines.bench.against_peer import (
    PAGE_HEAD, alternate, ceiling_text, checks_text, compute_bound, cpu_task, defaults_closing, host_memory_lines,
    loss_check, plain_loop_step, profile_sides, profile_table, rounds_table, summarize, write_section,
    write_summary,
)


class FakeClock:
    """A clock that every step of a side advances by that side's cost; ``order`` records who stepped on what."""

    def __init__(self) -> None:
        self.now, self.order = 0.0, []

    def __call__(self) -> float:
        return self.now

    def side(self, name: str, cost: float):
        def step(batch):
            self.order.append((name, batch))
            self.now += cost
        return step


def test_alternate_alternates_the_order_and_times_every_side_every_round():
    clock = FakeClock()
    sides = {"ours": clock.side("ours", 1.0), "peer": clock.side("peer", 3.0)}
    rounds = alternate(sides, ["a", "b", "c"], repeats=3, steps=2, clocks={"cpu": clock, "wall": clock})
    firsts = [clock.order[4 * r][0] for r in range(3)]
    assert firsts == ["ours", "peer", "ours"]  # the order alternates between rounds
    assert [b for name, b in clock.order if name == "ours"] == ["a", "b", "c", "a", "b", "c"]  # same batches, cycling
    assert [b for name, b in clock.order if name == "peer"] == ["a", "b", "c", "a", "b", "c"]
    times = [{k: v for k, v in r.items() if k.endswith("_s")} for r in rounds]
    assert times == [{"ours_cpu_s": 1.0, "ours_wall_s": 1.0, "peer_cpu_s": 3.0, "peer_wall_s": 3.0}] * 3  # per step
    assert all(r["ours_faults"] >= 0 and r["peer_faults"] >= 0 for r in rounds)  # the process's, per step
    summary = summarize(rounds, "cpu")
    assert summary == {"ratio_median": 3.0, "ratio_min": 3.0, "ratio_max": 3.0} and all(r["ratio"] == 3.0 for r in rounds)


def test_alternate_with_the_real_clocks_times_trivial_steps():
    rounds = alternate({"ours": lambda b: None, "peer": lambda b: sum(range(1000))}, [0], repeats=2, steps=3)
    assert len(rounds) == 2
    for row in rounds:
        assert set(row) == {f"{side}_{clock}_s" for side in ("ours", "peer") for clock in ("cpu", "wall")} | {
            "ours_faults", "peer_faults"}
        assert all(v >= 0 for v in row.values())


def test_retaining_sides_start_each_round_with_their_allocator_set_and_one_untimed_step(monkeypatch):
    clock, switched = FakeClock(), []
    monkeypatch.setattr(against_peer, "retain_freed_memory", lambda on: switched.append((clock.now, on)))
    sides = {"ours": clock.side("ours", 1.0), "peer": clock.side("peer", 3.0)}
    rounds = alternate(sides, ["a", "b", "c"], repeats=2, steps=2, clocks={"cpu": clock}, retaining=("ours",))
    # each side's round: the switch, one step on the round's first batch, then the timed steps
    assert clock.order == [("ours", "a"), ("ours", "a"), ("ours", "b"), ("peer", "a"), ("peer", "a"), ("peer", "b"),
                           ("peer", "c"), ("peer", "c"), ("peer", "a"), ("ours", "c"), ("ours", "c"), ("ours", "a")]
    assert [on for _, on in switched] == [True, False, False, True]
    assert [{k: v for k, v in r.items() if k.endswith("_s")} for r in rounds] == [{"ours_cpu_s": 1.0, "peer_cpu_s": 3.0}] * 2
    assert alternate(sides, ["a"], repeats=1, steps=1, clocks={"cpu": clock}) and len(switched) == 4  # none: no switch


def test_cpu_task_applies_the_configs_host_allocator_before_any_step(monkeypatch, tmp_path):
    """As the trainer at setup: a bench's first steps run on ours' allocator (module docstring of ``cpu_task``)."""
    calls = []
    run = SimpleNamespace(host_allocator="retain", data_root=None, seed=0, memory_format="auto")
    loaded = SimpleNamespace(run=run, config={}, task_class=lambda: "task class")
    monkeypatch.setattr(against_peer, "load_config", lambda *a, **k: loaded)
    monkeypatch.setattr(against_peer, "setup_task", lambda *a, **k: calls.append("setup") or "task")
    monkeypatch.setattr(against_peer, "use_host_allocator",
                        lambda setting, device: calls.append((setting, device.type)))
    assert cpu_task("any", [], None, tmp_path) == ("task", loaded)
    assert calls == ["setup", ("retain", "cpu")]


def test_a_peer_beside_a_retaining_side_steps_and_is_profiled_on_a_thread_of_its_own():
    import threading

    import torch

    threads = {}
    model = torch.nn.Linear(8, 2)

    def side(name):
        def step(batch):
            threads.setdefault(name, set()).add(threading.get_ident())
            model(batch).sum().backward()
        return step

    sides, batches = {"ours": side("ours"), "peer": side("peer")}, [torch.randn(4, 8)]
    alternate(sides, batches, repeats=2, steps=1, retaining=("ours",))
    profiles = profile_sides(sides, batches, 1, retaining=("ours",))
    main = threading.get_ident()
    assert threads["ours"] == {main} and len(threads["peer"]) == 1 and main not in threads["peer"]
    assert "aten::addmm" in profiles["peer"]["ops"] and "aten::addmm" in profiles["ours"]["ops"]  # both recorded
    threads.clear()
    alternate(sides, batches, repeats=1, steps=1)
    assert threads == {"ours": {main}, "peer": {main}}  # nothing retained: one thread


@pytest.mark.parametrize("allocator, where", [
    ("retain", "ours retains freed memory between steps"), ("system", "both sides on glibc's defaults")])
def test_the_host_memory_bullet_says_where_memory_came_from_and_the_faults(allocator, where):
    rounds = [{"ours_faults": f, "peer_faults": 10 * f + 5000} for f in (0, 2, 1)]
    line, = host_memory_lines({"ours_host_allocator": allocator, "rounds": rounds})
    assert where in line and line.endswith("page faults per step, ours 1, peer 5,010 (median over rounds)")
    assert host_memory_lines({"rounds": [{"ours_cpu_s": 1.0}]}) == []  # a record from before faults were counted


def test_the_closing_names_each_default_that_differs():
    fused = {"ours_optimizer": "fused"}
    assert defaults_closing(fused) == (" So the two steps differ by the optimizer's kernel and the engine's checks: the "
                                       "ratio is what the pipeline's default fused optimizer gives at the same network "
                                       "and precision.")
    both = defaults_closing({**fused, "ours_layout": "channels_last", "ours_host_allocator": "retain"})
    assert both == (" So the two steps differ by the convolutions' memory layout, the optimizer's kernel, where freed "
                    "memory goes and the engine's checks: the ratio is what the pipeline's defaults (channels-last "
                    "weights on the CPU, the fused optimizer, freed memory retained) give at the same network, weights "
                    "and precision.")


def test_loss_check_and_rounds_table():
    assert loss_check(2.0, 2.0 + 1e-5)["equal"] and not loss_check(2.0, 2.01)["equal"]
    assert loss_check(1.0, 1.0, dropout="off")["dropout"] == "off"
    rows = [{"ours_cpu_s": 0.01, "peer_cpu_s": 0.02, "ours_wall_s": 0.011, "peer_wall_s": 0.021, "ratio": 2.0}]
    assert rounds_table(rows, "cpu").splitlines()[-1] == "| 1 | 10.0 | 20.0 | 11.0 | 21.0 | 2.00 |"
    assert rounds_table(rows, "cpu", unit="s", digits=2).splitlines()[-1] == "| 1 | 0.01 | 0.02 | 0.01 | 0.02 | 2.00 |"


def test_plain_loop_step_trains_and_returns_the_loss():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 3)
    for first in (False, True):
        step = plain_loop_step(model, optimizer, lambda batch: model(batch).pow(2).mean(), zero_grad_first=first)
        losses = [step(x) for _ in range(3)]
        assert losses[0] > losses[1] > losses[2]


def test_profile_sides_and_table_show_the_largest_operators_and_what_only_one_side_runs():
    import torch

    x = torch.randn(64, 64)
    profiles = profile_sides({"ours": lambda b: (b @ b).norm(), "peer": lambda b: b @ b}, [x], steps=2)
    assert {"aten::mm", "aten::linalg_vector_norm"} <= profiles["ours"]["ops"].keys()
    assert "aten::linalg_vector_norm" not in profiles["peer"]["ops"]
    assert profiles["ours"]["cpu_self_ms"] == sum(profiles["ours"]["ops"].values())
    fake = {"ours": {"cpu_self_ms": 10.0, "ops": {"conv": 8.0, "norm": 0.5, "tiny": 0.01}},
            "peer": {"cpu_self_ms": 9.6, "ops": {"conv": 7.9, "add": 0.1, "tiny": 0.01}}}
    lines = profile_table(fake, rows=1).splitlines()
    assert lines[2:] == ["| `conv` | 8.00 | 7.90 | +0.10 |",  # the largest, then the largest difference
                         "| `norm` | 0.50 | - | +0.50 |", "| all operators | 10.00 | 9.60 | +0.40 |"]
    checks = {"ours": {"cpu_self_ms": 100.0, "ops": {"aten::_foreach_norm": 1.0, "aten::linalg_vector_norm": 0.6}},
              "peer": {"cpu_self_ms": 99.0, "ops": {"aten::linalg_vector_norm": 0.1, "aten::stack": 0.3}}}
    assert "ours beyond the peer's: 1.50 ms per step, 1.50% of our operators' time" in checks_text(checks)


def test_compute_bound_counts_a_step_s_flops_and_the_ceiling_follows_from_the_peak():
    import torch

    model = torch.nn.Linear(64, 32, bias=False)
    x = torch.randn(16, 64)

    def step(batch):
        model(batch).sum().backward()

    bound = compute_bound(step, x)
    # forward 2*16*64*32 and as much for the weight's gradient; an input that needs no gradient gets none
    assert bound["flop_per_step"] == 2 * 2 * 16 * 64 * 32
    assert compute_bound(step, x.requires_grad_())["flop_per_step"] == 3 * 2 * 16 * 64 * 32
    assert sum(bound["flop_by_op"].values()) == bound["flop_per_step"]
    assert bound["matmul_peak_flops"] > 1e8  # any CPU multiplies faster than 0.1 GFLOP/s
    record = {"clock": "cpu", "rounds": [{"ours_cpu_s": 1.0, "peer_cpu_s": 1.2}, {"ours_cpu_s": 1.1, "peer_cpu_s": 1.3}],
              "compute": {"flop_per_step": 90e9, "matmul_peak_flops": 100e9, "flop_by_op": {"aten.mm": 90e9}}}
    text = ceiling_text(record)
    # at the peak the arithmetic takes 0.9 s; the peer's median 1.25 s: 1.25 / 0.9 = 1.39
    assert "this arithmetic at that rate takes 0.9 s" in text and "**1.39**x the peer's speed" in text
    assert "Ours ran it at 85.7 GFLOP/s (86% of the peak)" in text and "the ceiling of the ratio" in text
    faster = ceiling_text({**record, "compute": {**record["compute"], "flop_per_step": 120e9}})  # 114 GFLOP/s
    assert "(114% of the peak)" in faster and "its peak is no ceiling here" in faster and "the ceiling of" not in faster
    assert ceiling_text({"clock": "cpu", "rounds": []}) == ""
    assert "products themselves" not in text  # no per-operator profile: no bound at the products' rate
    profiled = ceiling_text({**record, "profile": {"ours": {"cpu_self_ms": 1000.0, "ops": {"aten::mm": 600.0,
                                                                                         "aten::addmm": 150.0,
                                                                                         "aten::gelu": 250.0}},
                                                   "peer": {"cpu_self_ms": 1200.0, "ops": {"aten::mm": 900.0}}}})
    # ours' products 750 ms of 1000 (90 GFLOP in 0.75 s: 120 GFLOP/s); the peer's 1200 ms over them: 1.6
    assert "products themselves (`aten::mm`, `aten::addmm`) took 750.0 ms of its 1,000.0 ms a step" in profiled
    assert "at 120.0 GFLOP/s" in profiled and "the ratio would be **1.60**x" in profiled


def test_write_section_makes_the_page_replaces_in_place_appends_and_puts_a_lever_after_its_base(tmp_path):
    page = tmp_path / "docs" / "page.md"
    write_section(page, "a", "## a\nfirst-text")
    assert page.read_text() == PAGE_HEAD.rstrip() + "\n\n<!-- section:a -->\n## a\nfirst-text\n<!-- /section:a -->\n"
    write_section(page, "b", "## b")
    write_section(page, "a", "## a\nsecond-text\n")  # replaced in place: still before b
    text = page.read_text()
    assert text.count("<!-- section:a -->") == 1 and "first-text" not in text and "second-text" in text
    assert text.index("section:a -->") < text.index("section:b -->")
    write_section(page, "a+lever", "## a with a lever")  # after its base section, before b
    write_section(page, "c+lever", "## c with a lever")  # no base section: at the end
    text = page.read_text()
    order = [text.index(f"<!-- section:{n} -->") for n in ("a", "a+lever", "b", "c+lever")]
    assert order == sorted(order)
    assert "<!-- /section:a -->\n\n<!-- section:a+lever -->\n## a with a lever\n<!-- /section:a+lever -->" in text
    write_section(page, "a+lever", "## a with a lever, again")  # replaced in place
    text = page.read_text()
    assert text.count("<!-- section:a+lever -->") == 1 and "again" in text
    assert text.index("section:a+lever -->") < text.index("section:b -->")


def test_the_summary_has_a_row_per_comparison_with_the_checkpoint_ratio_where_measured(tmp_path):
    def record(name: str, **fields):
        return {"section": name, "clock": "cpu", "device": "cpu", "threads": 1, "date_utc": "d", "precision": "fp32",
                "levers": [], **fields}

    ratios = {"ratio_median": 1.5, "ratio_min": 1.25, "ratio_max": 1.75}
    rounds = [{"ours_cpu_s": 10.0, "peer_cpu_s": p} for p in (12.0, 20.0, 15.0)]
    kept = {"a": record("a", **ratios, to_checkpoint={"rounds": rounds}),
            "b": record("b", comparisons=[{"mode": "l1", "precision": "bf16", **ratios}, {"step": "plain", **ratios}]),
            "c": record("c", variants=[{"mode": "CUT", **ratios, "bf16": ratios}], to_checkpoint={"rounds": rounds}),
            "d": record("d")}  # no ratio: not a comparison (objectives+compile's kind)
    (tmp_path / "records").mkdir()
    for name, r in kept.items():
        (tmp_path / "records" / f"{name}.json").write_text(json.dumps(r))
    page = tmp_path / "page.md"
    write_section(page, "a", "## a")
    for _ in range(2):  # the second replaces the first
        write_summary(page, tmp_path / "records")
    text = page.read_text()
    assert text.count("<!-- summary -->") == 1 and text.index("<!-- summary -->") < text.index("<!-- section:a -->")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `a` | ours fp32 | **1.50** (1.25-1.75) | **1.50** (1.20-2.00) | cpu, 1 | d |",
        "| `b` | l1, ours bf16 | **1.50** (1.25-1.75) | - | cpu, 1 | d |",
        "| `b` | plain | **1.50** (1.25-1.75) | - | cpu, 1 | d |",
        "| `c` | CUT, ours fp32 | **1.50** (1.25-1.75) | **1.50** (1.20-2.00) | cpu, 1 | d |",
        "| `c` | CUT, ours bf16 | **1.50** (1.25-1.75) | - | cpu, 1 | d |"]
