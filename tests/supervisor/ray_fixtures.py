"""The one local Ray head a test module shares (tests/supervisor/test_ray_helpers.py starts it): a
workspace under a short /tmp path holding ``config`` with its ``[cluster]``, the head started with
``cluster up`` and the worker raylets ``workers`` asks for; at the end every Ray process is ended by
pid and the workspace removed.  A module makes it its ``scope="module"`` fixture::

    @pytest.fixture(scope="module")
    def ray():
        with ray_head(CONFIG, workers=[{"node_a": 1}]) as rc:
            yield rc
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tests.supervisor.test_ray_helpers import RayCluster, make_workspace, remove_workspace, start_cluster


@contextlib.contextmanager
def ray_head(config: str, *, workers: list[dict[str, float]] = (), token: str | None = None) -> Iterator[RayCluster]:
    root = make_workspace(config, token=token)
    rc = None
    try:
        rc = start_cluster(root, workers=list(workers))
        yield rc
    finally:
        if rc is not None:
            rc.close()
        remove_workspace(root)


__all__ = ["ray_head"]
