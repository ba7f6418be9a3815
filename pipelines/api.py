"""The engine's public API for a domain's commands, comparison report and benchmark.

A domain's front modules (``report.py``, ``bench.py`` and the modules that declare a ``COMMAND``)
import the engine from here and nowhere else in ``contrasuite.pipelines`` (tests/test_dependency_rule.py);
the rest of a domain never imports the engine. What is here:

- configs and runs: :func:`load_config`, :class:`ConfigError`, :func:`default_data_root`,
  :func:`load_checkpoint` (:class:`CheckpointError`), :func:`write_json`, :func:`logged_per_epoch` (what a run logged);
- a comparison report (:mod:`contrasuite.pipelines.compare`): it declares a :class:`Comparison` of
  :class:`Arm` s and a renderer, :func:`compare_main` trains what has no current record and renders the page;
  :func:`difference` (a difference of means over seeds with its standard error);
  :class:`Effect`: a paper's claim and the arms that measure it, for ``EFFECTS`` (the effects table), with
  the labels of its ``settled`` (:data:`NOT_EITHER`, :data:`NO_OFFICIAL`, :data:`NOT_RUN`);
- running the project's own commands in child processes (the runner trains this way): :data:`ROOT`,
  :func:`run_cli`, :func:`thread_env`;
- devices: :func:`pick_device`;
- a task outside the trainer (benchmarks, a report's evaluation): :func:`setup_task`, and
  :class:`StepRunner` for its training steps as the trainer makes them;
- :func:`write_output`: a benchmark's rows as JSON; :func:`mean_std`: a results table's cell;
- a training step of ours against a peer's, alternating rounds in one process; the record and its page section
  (:mod:`contrasuite.pipelines.bench.against_peer`, for ``contrasuite bench <d> --against peer``): running,
  :func:`cpu_task`, :func:`our_step`, :func:`pull_levers`, :func:`optimizer_kernel`, :func:`retaining_sides` (which sides
  retain freed memory, ``run.host_allocator``; :func:`settle` a side's allocator before its steps,
  :func:`on_its_thread` the peer's steps beside them), :func:`alternate`, :func:`synced_clocks`,
  :func:`profile_sides` (both sides' operators), :func:`compute_bound` (our step's FLOPs and the machine's peak); the record,
  :data:`RECORDS`, :func:`run_variant`, :func:`summarize` (a comparison's ratios), :func:`outcome`, :func:`ours_text`, :func:`peer_version`, :func:`peer_record`,
  :func:`host_allocator_fields`;
  its section, :func:`heading`,
  :func:`check_text`, :func:`machine_lines`, :func:`host_memory_lines`, :func:`rounds_table`, :func:`round_cells`, :func:`ratio_sentence`,
  :func:`profile_table`, :func:`checks_text`, :func:`profile_note` (a "where the time goes" paragraph with the profile's table),
  :func:`ceiling_text` (the ratio our step's arithmetic would reach at that peak),
  :func:`where_words` (its words on the optimizer's kernel and the weights' layout, :func:`weight_layout`;
  :func:`differences`, what our step does otherwise);
  the command, :func:`official_flags` (a bench whose peer is the official code), :func:`peer_flags` and
  :func:`peer_main` (``--report``: a record into its page section).
"""

from contrasuite.pipelines.bench import write_output
from contrasuite.pipelines.bench.against_peer import (
    HAND_LOOP_EPOCH_END, RECORDS, PeerRun, alternate, ceiling_text, check_text, checkpoint_sentence, checks_text,
    comparison_section, compute_bound, cpu_task, differences, heading, host_allocator_fields, host_memory_lines,
    machine_lines, median_step, official_flags, on_its_thread, optimizer_kernel, our_step, ours_text, outcome,
    peer_flags, peer_main, peer_record, peer_version, plain_loop_step, profile_note, profile_sides, profile_table,
    pull_levers, retaining_sides, round_cells, run_variant, settle, summarize, synced_clocks, to_checkpoint_rounds,
    weight_layout, where_words,
)
from contrasuite.pipelines.checkpoint import CheckpointError, load as load_checkpoint
from contrasuite.pipelines.cli_runs import ROOT, run_cli, thread_env
from contrasuite.pipelines.compare import Arm, Comparison, main as compare_main
from contrasuite.pipelines.effects import NO_OFFICIAL, NOT_EITHER, NOT_RUN, Effect
from contrasuite.pipelines.config import ConfigError, default_data_root, load_config
from contrasuite.pipelines.precision import pick_device
from contrasuite.pipelines.run_dir import logged_per_epoch, write_json
from contrasuite.pipelines.standalone import StepRunner, setup_task
from contrasuite.pipelines.tables import difference, mean_std

__all__ = [
    "Arm", "Comparison", "Effect", "NOT_EITHER", "NO_OFFICIAL", "NOT_RUN", "compare_main", "difference",
    "ROOT", "CheckpointError", "ConfigError", "StepRunner", "load_checkpoint", "default_data_root", "load_config",
    "logged_per_epoch", "mean_std", "pick_device", "run_cli", "thread_env",
    "write_json", "write_output", "setup_task",
    # --against peer benches (contrasuite.pipelines.bench.against_peer)
    "HAND_LOOP_EPOCH_END", "RECORDS", "PeerRun", "alternate", "ceiling_text", "check_text", "checkpoint_sentence",
    "checks_text", "comparison_section", "compute_bound", "cpu_task", "differences", "heading",
    "host_allocator_fields", "host_memory_lines", "machine_lines", "median_step", "official_flags", "on_its_thread",
    "optimizer_kernel", "our_step", "ours_text", "outcome", "peer_flags", "peer_main", "peer_record",
    "peer_version", "plain_loop_step", "profile_note", "profile_sides", "profile_table", "pull_levers",
    "retaining_sides", "round_cells", "run_variant", "settle", "summarize", "synced_clocks", "to_checkpoint_rounds",
    "weight_layout", "where_words",
]
