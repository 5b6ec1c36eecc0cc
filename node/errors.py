"""Errors the CLI reports as one line (kept out of node/cli.py so that `python -m node.cli`
and the plugins importing it share one class)."""


class UsageError(Exception):
    """Bad input or an answer the CLI cannot use; the message names the fix."""
