"""Metrics: ``metrics.csv`` always (long format: one row per value), TensorBoard when asked.

Columns: ``time, epoch, step, name, value``. Names are ``train/<key>``, ``val/<key>``,
``health/<key>``, ``lr/<optimizer>``, ``param/<name>`` (temperatures, logit scales),
``grad_norm/<optimizer>``. Long format keeps one file valid however the logged keys change.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Mapping

FIELDS = ("time", "epoch", "step", "name", "value")


class MetricsLog:
    """Append-only CSV (plus optional TensorBoard) on the main rank; a no-op elsewhere."""

    def __init__(self, run_dir: Path, *, enabled: bool = True, tensorboard: bool = False) -> None:
        self.path = run_dir / "metrics.csv"
        self.enabled = enabled
        self._tb = None
        if not enabled:
            return
        if not self.path.exists():
            with open(self.path, "w", newline="") as handle:
                csv.writer(handle).writerow(FIELDS)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as err:
                raise RuntimeError(f"run.tensorboard=true needs the tensorboard package ({err})") from None

            self._tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def truncate_after(self, step: int) -> None:
        """Drop rows logged after ``step`` (a resumed run repeats those steps)."""
        if not self.enabled or not self.path.exists():
            return
        with open(self.path, newline="") as handle:
            rows = list(csv.reader(handle))
        kept = [rows[0]] + [r for r in rows[1:] if len(r) == len(FIELDS) and int(r[2]) <= step]
        tmp = self.path.with_name(".metrics.csv.tmp")
        with open(tmp, "w", newline="") as handle:
            csv.writer(handle).writerows(kept)
        tmp.replace(self.path)

    def log(self, values: Mapping[str, float], *, step: int, epoch: int) -> None:
        if not self.enabled or not values:
            return
        now = f"{time.time():.3f}"
        with open(self.path, "a", newline="") as handle:
            writer = csv.writer(handle)
            for name, value in values.items():
                writer.writerow((now, epoch, step, name, f"{float(value):.8g}"))
        if self._tb is not None:
            for name, value in values.items():
                self._tb.add_scalar(name, float(value), step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
