"""Errors the user can fix: reported as one line, exit status 2."""


class UsageError(Exception):
    """Bad arguments, files or environment; the message is the whole explanation."""
