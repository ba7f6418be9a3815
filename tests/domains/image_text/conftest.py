import json
from pathlib import Path

import pytest

TINY_OPEN_CLIP = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture
def tiny_open_clip(tmp_path) -> Path:
    """A JSON model config of a tiny open_clip CLIP (its name is the file stem, ``tiny-clip-test``)."""
    path = tmp_path / "tiny-clip-test.json"
    path.write_text(json.dumps(TINY_OPEN_CLIP))
    return path
