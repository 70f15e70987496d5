"""The time left for a job, as a point and a band: what the Regeneration and Training pages show.

Regeneration (:func:`backend.regen.follow.eta_band`) and training (``ui.train.series.eta``) make it
their own way; both give this one shape, so the pages format it alike.

The band always contains its point: an :class:`Eta` widens a band made on one side of its point
to reach it, and :meth:`Eta.range_text` rounds the low end down and the high end up, so the
written band ("20-36 m") still contains the point written beside it ("20 m 40 s").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_UNITS = (("d", 86400.0), ("h", 3600.0), ("m", 60.0))


@dataclass(frozen=True)
class Eta:
    point_s: float | None
    low_s: float | None
    high_s: float | None
    basis: str  # how the point and the band were made, for the page's tooltip

    def __post_init__(self) -> None:
        p, lo, hi = self.point_s, self.low_s, self.high_s
        if lo is not None and hi is not None and lo > hi:
            lo, hi = hi, lo
        if p is not None:
            lo = p if lo is None or lo > p else lo
            hi = p if hi is None or hi < p else hi
        object.__setattr__(self, "low_s", lo)
        object.__setattr__(self, "high_s", hi)

    @property
    def known(self) -> bool:
        return self.point_s is not None

    def range_text(self) -> str | None:
        """The band as ``31-47 h``, in the unit of its larger end; the low end rounded down and the
        high end up, so the point lies within the written range.  None when there is no band."""
        if self.low_s is None or self.high_s is None or not (math.isfinite(self.low_s)
                                                             and math.isfinite(self.high_s)):
            return None
        lo, hi = max(0.0, self.low_s), max(0.0, self.high_s)
        for unit, size in _UNITS:
            if hi >= size * 2:
                return f"{math.floor(lo / size):.0f}-{math.ceil(hi / size):.0f} {unit}"
        return f"{math.floor(lo):.0f}-{math.ceil(hi):.0f} s"
