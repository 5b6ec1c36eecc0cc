"""Errors the CLI reports as one line (kept out of node/cli/ so that every command group and
library module raises the one class the CLI catches)."""


class UsageError(Exception):
    """Bad input or an answer the CLI cannot use; the message names the fix."""
