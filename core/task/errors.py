"""The data errors every domain raises for a missing, corrupt or undecodable data file.

The CLI turns it into exit code 2 and one line, so its message must name the file (or folder) and
say what is wrong with it.
"""


class DataError(RuntimeError):
    """A missing, corrupt or undecodable data file; the message names the file."""


class CorruptData(DataError):
    """A data file that is there but cannot be used (an undecodable image, a truncated archive): unlike a
    missing dataset, never a reason to skip a config (``contrasuite smoke`` fails on it)."""


class ConfigValueError(ValueError):
    """A config value the task cannot use, found where it is used (a batch larger than the data, an option
    that contradicts another); the message names the key. The CLI prints it in one line with exit code 2."""


class SetupError(RuntimeError):
    """A run the task cannot do as set up (e.g. more processes than it supports); the message says why."""


class OneProcessOnly(SetupError):
    """A task that runs in one process only (graph: full-batch), started under several (``torchrun``)."""


def one_line(err: BaseException) -> str:
    """An error's message folded onto one line (what the CLI prints before exiting with status 2)."""
    return " ".join(str(err).split()) or type(err).__name__
