"""Benchmarks run by ``contrasuite bench NAME [args]``: each module here with ``main(argv) -> int`` is one
(``against_peer`` holds what the domains' ``--against peer`` benches share)."""

import json
from pathlib import Path
from typing import Any


def write_output(path: Path | None, data: Any) -> None:
    """Write a bench's rows as JSON to ``--output`` when one was given (folders made as needed)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
