"""The CLI's error boundary: a run folder that cannot be made, a full disk under a checkpoint and Ctrl-C each
give one line (exit 2, 2 and 130); a bug gives its traceback followed by one line that says it is a bug (exit 1)."""

import errno
import json
from pathlib import Path

import pytest
import toy_task

from contrasuite.pipelines import checkpoint
from contrasuite.pipelines.cli import main


def _err_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def _only_run(root: Path) -> Path:
    (run_dir,) = [p.parent for p in root.rglob("config.yaml")]
    return run_dir


def test_an_output_root_that_is_a_file_is_named(toy_yaml, tmp_path, capsys):
    blocker = tmp_path / "runs"
    blocker.write_text("not a folder")
    assert main(["train", str(toy_yaml(run={"max_steps": 1}))]) == 2
    (line,) = _err_lines(capsys)
    assert f"run.output_root={blocker}" in line and f"{blocker} is a file, not a folder" in line
    assert blocker.read_text() == "not a folder"


def test_an_output_root_without_permission_is_named(toy_yaml, tmp_path, capsys, monkeypatch):
    def refuse(self, *args, **kwargs):  # root ignores chmod, so the refusal is the system's PermissionError
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    assert main(["train", str(toy_yaml(run={"max_steps": 1}))]) == 2
    (line,) = _err_lines(capsys)
    assert f"run.output_root={tmp_path / 'runs'}" in line and "Permission denied" in line


@pytest.mark.parametrize("how", ["oserror", "torch"])
def test_a_full_disk_under_a_checkpoint_is_one_line_and_keeps_the_old_one(toy_yaml, tmp_path, capsys, monkeypatch, how):
    path = toy_yaml(run={"epochs": 2, "max_steps": 4, "checkpoint_every_steps": 2})
    assert main(["train", str(path), "run.max_steps=2"]) == 0
    run_dir = _only_run(tmp_path / "runs")
    last = run_dir / "checkpoints" / "last.pt"
    kept = last.read_bytes()
    capsys.readouterr()

    def full(self, data):
        if how == "oserror":
            raise OSError(errno.ENOSPC, "No space left on device")
        raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: "
                           "file write failed")

    monkeypatch.setattr(checkpoint._HashingWriter, "write", full)
    assert main(["resume", str(run_dir), "run.max_steps=4"]) == 2
    (line,) = _err_lines(capsys)
    assert f"{last}: could not write the checkpoint" in line and "previous last.pt, if any, is unchanged" in line
    assert ("No space left on device" in line) == (how == "oserror")
    assert last.read_bytes() == kept and checkpoint.load(last)
    assert json.loads((run_dir / "status.json").read_text())["state"] == "failed"


def test_ctrl_c_is_one_line_and_marks_the_run_interrupted(toy_yaml, tmp_path, capsys, monkeypatch):
    def interrupt(self, batch, step):
        raise KeyboardInterrupt

    monkeypatch.setattr(toy_task.ToyTask, "train_step", interrupt)
    assert main(["train", str(toy_yaml(run={"max_steps": 2}))]) == 130
    (line,) = _err_lines(capsys)
    assert "interrupted (Ctrl-C)" in line and "contrasuite resume" in line
    assert json.loads((_only_run(tmp_path / "runs") / "status.json").read_text())["state"] == "interrupted"


def test_a_bug_shows_its_traceback_then_one_line_saying_so(toy_yaml, tmp_path, capsys, monkeypatch):
    def broken(self, batch, step):
        return None + 1

    monkeypatch.setattr(toy_task.ToyTask, "train_step", broken)
    assert main(["train", str(toy_yaml(run={"max_steps": 2}))]) == 1
    lines = _err_lines(capsys)
    assert lines[0] == "Traceback (most recent call last):" and any("None + 1" in line for line in lines)
    assert lines[-1].startswith("contrasuite train: unexpected TypeError (traceback above): a bug")
    run_dir = _only_run(tmp_path / "runs")
    assert lines[-1].endswith(f"the run folder {run_dir} keeps its metrics.csv and status.json")
    assert "TypeError" in json.loads((run_dir / "status.json").read_text())["error"]


def test_a_model_beyond_memory_is_one_line(toy_yaml, capsys):
    """A real allocation failure: the toy network with a 10^12-unit layer (32 TB) is refused by the CPU allocator."""
    assert main(["train", str(toy_yaml(run={"max_steps": 1}, config={"hidden": 10**12}))]) == 2
    (line,) = _err_lines(capsys)
    assert line.startswith("contrasuite train: out of memory (DefaultCPUAllocator: can't allocate memory: you tried to "
                           "allocate") and "lower the config's batch size" in line


def test_eval_of_weights_from_another_network_is_one_short_line(toy_yaml, tmp_path, capsys):
    """best.pt of a wider network copied into a run: counts and a few keys, not torch's whole key listing."""
    import shutil

    from contrasuite.pipelines import trainer
    from contrasuite.pipelines.config import load_config

    run = trainer.train(load_config(toy_yaml(run={"max_steps": 2}), [f"run.output_root={tmp_path / 'a'}"]))
    wide = trainer.train(load_config(toy_yaml(run={"max_steps": 2}, config={"hidden": 40}),
                                     [f"run.output_root={tmp_path / 'b'}"]))
    for name in ("best.pt", "best.pt.json"):
        shutil.copy(wide / "checkpoints" / name, run / "checkpoints" / name)
    capsys.readouterr()
    assert main(["eval", str(run), "--checkpoint", "best"]) == 2
    line = _err_lines(capsys)[-1]
    assert "modules 'model' does not fit: 3 keys of another shape (checkpoint -> network): 0.weight [40,8] -> [16,8]" in line
    assert len(line) <= 700
