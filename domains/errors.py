"""The data error every domain raises for a missing, corrupt or undecodable data file.

The CLI turns it into exit code 2 and one line, so its message must name the file (or folder) and
say what is wrong with it.
"""


class DataError(RuntimeError):
    """A missing, corrupt or undecodable data file; the message names the file."""
