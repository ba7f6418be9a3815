"""The Task protocol's optional hooks are declared (``TaskHooks``) and looked up by name, never guessed."""

import pytest

from contrasuite.core.task.protocol import hook


def test_hooks_are_found_or_none_and_unknown_names_are_refused():
    class Minimal:
        def state_dict(self):
            return {"step": 1}

    task = Minimal()
    assert hook(task, "state_dict")() == {"step": 1} and hook(task, "embed_for_health") is None
    with pytest.raises(AttributeError, match="'embed_for_healt' is not a Task hook"):
        hook(task, "embed_for_healt")
