"""Errors that end a command with one clear line and exit code 2."""


class MemlintError(Exception):
    """A user-facing error: bad input, unknown model, invalid flag combination."""

    exit_code = 2


class NotFollowed(MemlintError):
    """A launch command whose program memlint does not read (a module of an installed package, a program it does not
    know): memlint's limit, not the user's error. Where a whole plan is asked for (`memlint plan -- COMMAND`), it is
    said as a note on an all-unknown plan; elsewhere it ends the command as any MemlintError."""
