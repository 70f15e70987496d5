"""[[router]] entries in specdeck.toml: every mistake named as path:line: key: why; a good entry's
process spec (the cluster environment's python, no key on the command line, RUNNING on /liveness);
the regeneration and benchmark commands take a router's name."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from backend.flows.workspace import parse_config
from backend.sglang.router import CLUSTER_PYTHON_ENV, KEY_FILE_ENV, RouterConfig, to_process_spec
from backend.workspace import ConfigError

SERVERS = """
[[server]]
name = "a"
model_path = "/m"
port = 18001

[[server]]
name = "b"
model_path = "/m"
port = 18002
"""


def _problems(text: str, path: Path) -> list[str]:
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        parse_config(text, path)
    return exc.value.problems


def test_each_mistake_is_named_with_its_line_and_key(tmp_path):
    path = tmp_path / "specdeck.toml"
    text = SERVERS + """
[[router]]
name = "r1"
port = 18001
servers = ["a", "c"]

[[router]]
name = "r2"
port = 19000
policy = "fastest"

[[router]]
name = "b"
port = 19100
control_plane_key_file = "missing.key"
colour = "blue"
"""
    problems = _problems(text, path)
    lines = text.splitlines()

    def line_of(s: str, after: int = 0) -> int:
        return next(i + 1 for i, line in enumerate(lines) if i >= after and line.strip().startswith(s))

    assert f"{path}:{line_of('servers')}: router[0].servers: 'c' is not a [[server]] of this file (known: a, b)" \
        in problems
    assert f"{path}:{line_of('port = 18001', line_of('[[router]]'))}: router[0].port: port 18001 on 127.0.0.1 is also the port of " \
           "server 'a'" in problems
    assert any(p.startswith(f"{path}:{line_of('port = 18001', line_of('[[router]]'))}: router[0].port: metrics port 18002 (port + 1; "
                            "set metrics_port)") for p in problems)
    assert any(p.startswith(f"{path}:{line_of('policy')}: router[1].policy: Input should be 'cache_aware'")
               for p in problems)
    assert f"{path}:{line_of('colour')}: router[2].colour: unknown key (check its spelling)" in problems


def test_a_name_taken_by_a_server_an_unreadable_key_and_no_port(tmp_path):
    path = tmp_path / "specdeck.toml"
    (tmp_path / "empty.key").write_text("\n")
    text = SERVERS + """
[[router]]
name = "a"
port = 19000
control_plane_key_file = "empty.key"

[[router]]
name = "r"
"""
    problems = _problems(text, path)
    assert any(p.endswith("router[0].name: 'a' is already the name of a [[server]]; every process, server and "
                          "router needs its own name") for p in problems)
    assert any(p.endswith(f"router[0].control_plane_key_file: {tmp_path / 'empty.key'}: the control-plane key "
                          "file is empty") for p in problems)
    assert any(":" in p.split(": router[1]")[0] and p.endswith("router[1].port: required key is missing")
               for p in problems), problems


def test_a_router_needs_servers_to_route_to(tmp_path):
    problems = _problems('[[router]]\nname = "r"\nport = 19000\n', tmp_path / "specdeck.toml")
    assert problems == [f"{tmp_path / 'specdeck.toml'}:2: router[0].name: the workspace has no [[server]] to route to"]


def test_the_spec_runs_the_cluster_python_with_the_key_in_a_file_and_is_ready_on_liveness(tmp_path, monkeypatch):
    monkeypatch.setenv(CLUSTER_PYTHON_ENV, "/opt/cluster/bin/python")
    (tmp_path / "r.key").write_text("s3cret\n")
    cfg = RouterConfig(name="r", port=19000, policy="power_of_two", control_plane_key_file="r.key")
    spec = to_process_spec(cfg, tmp_path / "logs", tmp_path)
    assert spec.argv[0] == "/opt/cluster/bin/python" and spec.argv[1].endswith("backend/sglang/router_launch.py")
    argv = list(spec.argv)
    assert argv[argv.index("--policy") + 1] == "power_of_two"
    assert argv[argv.index("--prometheus-port") + 1] == "19001"
    assert argv[argv.index("--prometheus-host") + 1] == "127.0.0.1"
    assert "s3cret" not in " ".join(argv) and "s3cret" not in spec.to_json()
    assert spec.env[KEY_FILE_ENV] == str(tmp_path / "r.key")
    assert spec.readiness.kind == "http" and spec.readiness.url == "http://127.0.0.1:19000/liveness"
    assert "--worker-urls" not in argv  # workers join through /workers, so the spec never follows them


def test_the_regeneration_and_the_benchmark_take_a_router_by_name(tmp_path):
    from backend.cli.regen import UsageError, _server
    from backend.flows.bench_runner import target_of
    from backend.flows.workspace import load_workspace

    (tmp_path / "specdeck.toml").write_text(SERVERS.replace('model_path = "/m"', 'model_path = "/m"\nsimulate = true')
                                            + '\n[[router]]\nname = "fleet"\nport = 19000\nmetrics_port = 19005\n')
    args = argparse.Namespace(workspace=str(tmp_path))
    spec = _server("fleet", args, {})
    assert (spec.url, spec.name, spec.metrics) == ("http://127.0.0.1:19000", "fleet", "http://127.0.0.1:19005")
    with pytest.raises(UsageError, match=r"known: a, b; routers: fleet\)"):
        _server("nope", args, {})

    class S:
        ws = load_workspace(tmp_path)

    from backend.sglang.fleet import ServerFleet

    S.fleet = ServerFleet(S.ws, supervisor=None, background=False)
    S.sup = None
    t = target_of(S, "fleet")
    assert t.base_url == "http://127.0.0.1:19000" and t.name == "fleet" and t.python == sys.executable
    assert t.model_path == "/m"


def test_where_ray_needs_the_cluster_and_is_carried_into_the_spec(tmp_path):
    path = tmp_path / "specdeck.toml"
    router = '\n[[router]]\nname = "fleet"\nport = 19000\nwhere = "ray"\n'
    problems = _problems(SERVERS + router, path)
    assert any(p.startswith(f"{path}:") and "router[0].where: \"ray\" needs a [cluster] section" in p
               for p in problems), problems
    cfg = parse_config('[cluster]\nkind = "ray"\naddress = "local"\n' + SERVERS + router, path)
    spec = to_process_spec(RouterConfig.model_validate(cfg.router[0]), tmp_path / "logs", tmp_path)
    assert spec.where == "ray" and spec.num_gpus == 0
