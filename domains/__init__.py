"""contrasuite.domains: one package per domain; each exposes a Task (see ``task.py``)."""
