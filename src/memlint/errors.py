"""Errors that end a command with one clear line and exit code 2."""


class MemlintError(Exception):
    """A user-facing error: bad input, unknown model, invalid flag combination."""

    exit_code = 2
