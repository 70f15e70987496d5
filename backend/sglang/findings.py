"""What preflight reports: one :class:`Finding` per problem, with how to fix it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]
ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Finding:
    severity: Severity
    code: str
    found: str
    fix: str
    field: str | None = None  # the config field to change, when there is one

    def __str__(self) -> str:
        return f"[{self.severity}] {self.code}: {self.found} Fix: {self.fix}"


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)
