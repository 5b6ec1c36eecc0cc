"""jobs module."""
