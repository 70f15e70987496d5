"""A workspace with one simulated EAGLE-3 server, for the relaunch, sweep and ``bench run`` tests.

The workspace file carries comments in and around the server's entry, so a restore can be
checked to give the file back byte for byte.  :func:`session` opens a command-line
:class:`~backend.cli.session.Session` on it and, on the way out, stops every process the
test started.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from backend.cli.session import Session
from tests.helpers import free_port, wait_for
from tests.simws import make_models

__all__ = ["SERVER", "flag", "make_models", "session", "wait_until", "write_workspace"]
wait_until = wait_for  # the name the sweep and deploy tests use

SERVER = "spec"


def write_workspace(root: Path, target: Path, draft: Path, *, env: dict[str, str] | None = None) -> Path:
    """``root/specdeck.toml`` with server ``spec`` (EAGLE3, 3 steps, top-k 1, 4 draft tokens)."""
    root.mkdir(parents=True, exist_ok=True)
    env = {"SPECDECK_SIM_SPEED": "200", "SPECDECK_SIM_SEED": "1", **(env or {})}
    env_toml = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    text = f"""# sweep test workspace
[workspace]
name = "sweep"   # kept

[[server]]
name = "{SERVER}"   # the one server
model_path = {json.dumps(str(target))}
port = {free_port()}
simulate = true
decode_log_interval = 5
env = {{ {env_toml} }}

# the draft, as deployed
[server.speculative]
algorithm = "EAGLE3"  # EAGLE-3 draft
draft_model_path = {json.dumps(str(draft))}
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""
    (root / "specdeck.toml").write_text(text)
    return root


@contextlib.contextmanager
def session(root: Path):
    s = Session(str(root))
    try:
        yield s
    finally:
        try:
            s.sup.poll(sync_probes=True)
            for v in s.sup.views():
                if v.live:
                    s.sup.stop(v.name, actor="test", source="teardown", wait=True)
        finally:
            s.close()


def flag(argv, name: str) -> str | None:
    argv = list(argv)
    return argv[argv.index(name) + 1] if name in argv else None
