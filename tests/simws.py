"""What the tests that run a workspace with a simulated server share: the model folders, the
workspace's store, supervisor, server fleet and supervisor loop as one context that ends every
process it started, and the workspace behind the Servers page's AppTests."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from backend.sim.models import make_draft_dir, make_target_dir


def make_models(base: Path, *, target: str = "target", draft: str = "eagle3") -> tuple[Path, Path]:
    """A Llama-like target (hidden 4096) and its EAGLE-3 draft, in ``base/<target>`` and ``base/<draft>``."""
    return make_target_dir(base / target), make_draft_dir(base / draft)


class Fleet(NamedTuple):
    ws: object
    store: object
    sup: object
    fleet: object


@contextlib.contextmanager
def running_fleet(root: Path, text: str, *, monitor_kwargs: dict | None = None,
                  specs: Callable[[list], list] | None = None) -> Iterator[Fleet]:
    """``root/specdeck.toml`` holding ``text``, its store, a supervisor, the server fleet and a
    supervisor loop (0.2 s) running.  ``specs`` may change the fleet's process specs before they
    are synced.  On the way out every live process is stopped and everything is closed."""
    from backend.sglang.fleet import ServerFleet  # noqa: PLC0415
    from backend.supervisor.loop import SupervisorLoop  # noqa: PLC0415
    from backend.supervisor.supervisor import Supervisor  # noqa: PLC0415
    from backend.flows.workspace import CHECKS, SpecdeckConfig, parse_config  # noqa: PLC0415
    from backend.workspace import Workspace  # noqa: PLC0415
    from state import Store  # noqa: PLC0415

    root.mkdir(parents=True, exist_ok=True)
    path = root / "specdeck.toml"
    path.write_text(text)
    ws = Workspace(root=root, config_path=path, config=parse_config(text, path), model=SpecdeckConfig, checks=CHECKS)
    ws.ensure_dirs()
    store = Store(ws.store_path)
    sup = Supervisor(store, ws.run_dir)
    kw = {"monitor_kwargs": monitor_kwargs} if monitor_kwargs is not None else {}
    fleet = ServerFleet(ws, sup, store, gpu_probe=lambda: None, **kw)
    loop = SupervisorLoop(sup, interval_s=0.2)
    sup.sync_specs(specs(fleet.specs()) if specs is not None else fleet.specs())
    loop.start()
    try:
        yield Fleet(ws, store, sup, fleet)
    finally:
        try:
            stop_live(sup)
        finally:
            loop.stop()
            fleet.close()
            sup.close()
            store.close()


def stop_live(sup, *, actor: str = "test", source: str = "teardown") -> list[str]:
    """Stop every live process of ``sup``, the Ray jobs first: a local process may be the Ray head
    (``ray-head``) they need to be stopped at all.  Each is tried even when one before it fails; the
    first failure is raised at the end.  Returns the names in the order they were stopped."""
    views = [v for v in sup.views() if v.live]
    order = sorted(views, key=lambda v: 0 if v.spec.on_ray else 1)  # stable: the supervisor's order otherwise
    stopped: list[str] = []
    failed: BaseException | None = None
    for v in order:
        try:
            sup.stop(v.name, actor=actor, source=source, wait=True)
            stopped.append(v.name)
        except Exception as exc:
            failed = failed or exc
    if failed is not None:
        raise failed
    return stopped


def page_workspace(root: Path, monkeypatch, name: str, target: Path, draft: Path):
    """The Servers page's AppTest workspace: one simulated EAGLE-3 server ``sim`` (0.5.10, baseline
    90 tok/s) on fake GPUs, and its runtime; returns the runtime and the server's log path (its folder
    made), where a test writes the lines SGLang would print.  Close with
    :func:`tests.helpers.close_runtime`."""
    from backend import runtime as runtime_mod  # noqa: PLC0415

    (root / "specdeck.toml").write_text(f"""[workspace]
name = "{name}"

[telemetry]
source = "fake"

[[server]]
name = "sim"
model_path = "{target}"
port = 1
simulate = true
sglang_version = "0.5.10"
baseline_tok_s = 90.0

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
    rt = runtime_mod.get_runtime()
    log = rt.workspace.log_path("sim")
    log.parent.mkdir(parents=True, exist_ok=True)
    return rt, log
