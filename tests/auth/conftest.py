from __future__ import annotations

import pytest
from argon2 import PasswordHasher


class FakeClock:
    def __init__(self, t: float = 1_800_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cheap_hasher() -> PasswordHasher:
    """Argon2id at minimal cost: the format and checks are the same, the tests stay fast."""
    return PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
