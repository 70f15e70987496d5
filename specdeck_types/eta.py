"""The time left for a job, as a point and a band: what the Regeneration and Training pages show.

Regeneration (:func:`backend.regen.follow.eta_band`) and training (``ui.train.data.eta``) make it
their own way; both give this one shape, so the pages format it alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Eta:
    point_s: float | None
    low_s: float | None
    high_s: float | None
    basis: str  # how the point and the band were made, for the page's tooltip

    @property
    def known(self) -> bool:
        return self.point_s is not None
