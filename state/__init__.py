"""Specdeck's state store: the only code that touches SQLite."""

from state.store import Store, StoreClosed, StoreCorrupt, StoreError, StoreHealth, StoreUnwritable

__all__ = ["Store", "StoreClosed", "StoreCorrupt", "StoreError", "StoreHealth", "StoreUnwritable"]
