"""providers module."""
