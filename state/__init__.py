"""Specdeck's state store: the only code that touches SQLite."""

from state.store import Store, StoreClosed

__all__ = ["Store", "StoreClosed"]
