"""Server config validation, version detection and capabilities, and the launch builder."""

from __future__ import annotations

import stat
import sys

import pytest
from pydantic import ValidationError

from backend.sglang.config import ServerConfig, describe_validation_error
from backend.sglang.launch import build_argv, build_env, endpoints, server_args, to_process_spec
from backend.sglang.version import capabilities, clear_cache, detect_version, parse_version
from backend.workspace import ConfigError
from backend.flows.workspace import parse_config
from specdeck_types.process import Kind


def cfg(**kw) -> ServerConfig:
    base = {"name": "kimi", "model_path": "/models/Kimi-K2", "tp_size": 8, "gpus": list(range(8)),
            "mem_fraction_static": 0.85,
            "speculative": {"algorithm": "eagle3", "draft_model_path": "/drafts/k2", "num_steps": 3,
                            "eagle_topk": 1, "num_draft_tokens": 4},
            "cuda_graph": {"max_bs": 16}}
    base.update(kw)
    return ServerConfig.model_validate(base)


def test_config_defaults_and_normalisation():
    c = ServerConfig(name="s", model_path="/m")
    assert (c.host, c.port, c.tp_size, c.enable_metrics, c.python) == ("127.0.0.1", 30000, 1, True, "python3")
    assert c.speculative.algorithm is None and not c.spec_enabled
    assert cfg().speculative.algorithm == "EAGLE3"


@pytest.mark.parametrize("bad,field", [
    ({"speculative": {"algorithm": "EAGLE4"}}, "speculative.algorithm"),
    ({"port": 70000}, "port"),
    ({"name": "a/b"}, "name"),
    ({"gpus": [0, 0, 1, 2, 3, 4, 5, 6]}, "gpus"),
    ({"mem_fraction_static": 1.2}, "mem_fraction_static"),
    ({"cuda_graph": {"max_bs": 16, "maxbs": 8}}, "cuda_graph.maxbs"),
    ({"sglang_version": "latest"}, "sglang_version"),
])
def test_config_errors_name_the_field(bad, field):
    with pytest.raises(ValidationError) as exc:
        cfg(**bad)
    lines = describe_validation_error(exc.value, "specdeck.toml")
    assert any(line.startswith(f"specdeck.toml: {field}") for line in lines), lines


def test_gpus_fewer_than_tp_is_an_error():
    with pytest.raises(ValidationError, match="tp_size 8 needs at least 8 GPUs"):
        cfg(gpus=[0, 1])


def test_argv_for_old_and_new_versions():
    old = build_argv(cfg(), "0.5.4")
    assert old[:3] == ["python3", "-m", "sglang.launch_server"]
    assert old[old.index("--cuda-graph-max-bs") + 1] == "16"
    new = build_argv(cfg(), "0.5.23")
    assert "--cuda-graph-max-bs" not in new and new[new.index("--cuda-graph-max-bs-decode") + 1] == "16"
    for argv in (old, new):
        assert argv[argv.index("--speculative-algorithm") + 1] == "EAGLE3"
        assert argv[argv.index("--speculative-draft-model-path") + 1] == "/drafts/k2"
        assert argv[argv.index("--tp-size") + 1] == "8"
        assert argv[argv.index("--mem-fraction-static") + 1] == "0.85"
        assert "--enable-metrics" in argv
        assert all(isinstance(a, str) for a in argv)


def test_argv_without_speculation_and_with_extra_args():
    c = cfg(speculative={"algorithm": None, "draft_model_path": "/d"}, cuda_graph={"disable": True},
            enable_metrics=False, decode_log_interval=10, extra_args=["--log-level", "debug"])
    a = server_args(c, "0.5.10")
    assert not any(x.startswith("--speculative") for x in a)
    assert "--disable-cuda-graph" in a and "--enable-metrics" not in a
    assert a[a.index("--decode-log-interval") + 1] == "10"
    assert a[-2:] == ["--log-level", "debug"]


# From the reference (sglang.md §7, the --cuda-graph-max-bs row, and §8), checked there against
# the argparse layer of the real wheels: version -> (max-bs flag the builder writes,
# --cuda-graph-max-bs a deprecated alias, --cuda-graph-max-bs refused as ambiguous,
# --disable-cuda-graph deprecated).
VERSION_TABLE = [
    ("0.5.5", "--cuda-graph-max-bs", False, False, False),
    ("0.5.10", "--cuda-graph-max-bs", False, False, False),
    ("0.5.13", "--cuda-graph-max-bs", False, False, False),
    ("0.5.14", "--cuda-graph-max-bs-decode", True, False, True),
    ("0.5.15", "--cuda-graph-max-bs-decode", True, False, True),
    ("0.5.19", "--cuda-graph-max-bs-decode", True, False, True),
    ("0.5.20", "--cuda-graph-max-bs-decode", False, True, True),
    ("0.5.22", "--cuda-graph-max-bs-decode", False, True, True),
    ("0.5.23", "--cuda-graph-max-bs-decode", False, True, True),
]


@pytest.mark.parametrize("version, flag, alias, rejected, disable_deprecated", VERSION_TABLE)
def test_version_table_matches_the_reference(version, flag, alias, rejected, disable_deprecated):
    caps = capabilities(version)
    assert caps.cuda_graph_max_bs_flag == flag
    assert caps.legacy_cuda_graph_max_bs_deprecated is alias
    assert caps.legacy_cuda_graph_max_bs_rejected is rejected
    assert caps.disable_cuda_graph_deprecated is disable_deprecated
    argv = build_argv(cfg(), version)
    assert argv[argv.index(flag) + 1] == "16"
    other = "--cuda-graph-max-bs" if flag.endswith("-decode") else "--cuda-graph-max-bs-decode"
    assert other not in argv


def test_trust_remote_code_reaches_the_argv_and_the_simulator():
    from backend.sim.args import parse

    assert cfg().trust_remote_code is False and "--trust-remote-code" not in build_argv(cfg(), "0.5.23")
    argv = build_argv(cfg(trust_remote_code=True), "0.5.23")
    assert "--trust-remote-code" in argv
    ns, unknown = parse(argv[3:])
    assert ns.trust_remote_code is True and unknown == []


def test_simulated_launch_has_the_same_flags():
    real = build_argv(cfg(), "0.5.10")
    sim = build_argv(cfg(simulate=True), "0.5.10")
    assert sim[:3] == [sys.executable, "-m", "backend.sim.server"]
    assert sim[3:] == real[3:]
    env = build_env(cfg(simulate=True, env={"SPECDECK_SIM_SPEED": "50"}), "0.5.10")
    assert env["SPECDECK_SIM_SGLANG_VERSION"] == "0.5.10" and env["SPECDECK_SIM_SPEED"] == "50"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_endpoints_by_version():
    e = endpoints(cfg(host="0.0.0.0", port=31000), "0.5.4")
    assert e.base_url == "http://127.0.0.1:31000"
    assert e.server_info.endswith("/get_server_info") and e.model_info.endswith("/get_model_info")
    assert e.ready is None
    e = endpoints(cfg(), "0.5.23")
    assert e.server_info.endswith("/server_info") and e.ready.endswith("/ready")


def test_process_spec(tmp_path):
    spec = to_process_spec(cfg(simulate=True), tmp_path / "logs", "0.5.23")
    assert spec.kind == Kind.SERVER and spec.name == "kimi"
    assert spec.readiness.kind == "http" and spec.readiness.url == "http://127.0.0.1:30000/health"
    assert spec.log_path == str(tmp_path / "logs" / "kimi.log")
    assert spec.argv[1:3] == ("-m", "backend.sim.server") and spec.cwd
    assert spec.env["SPECDECK_SIM_SGLANG_VERSION"] == "0.5.23"


def test_capabilities_by_version():
    assert capabilities("0.4.6").accept_rate_meaning == "none"
    assert capabilities("0.5.4").accept_rate_meaning == "with_bonus"
    assert capabilities("0.5.10").accept_rate_meaning == "with_bonus"
    assert capabilities("0.5.16").accept_rate_meaning == "strict"
    assert not capabilities("0.4.6").health_generates and capabilities("0.4.10").health_generates
    assert capabilities("0.5.3.post3").health_503_while_starting
    assert capabilities("0.5.16").cuda_graph_max_bs_flag == "--cuda-graph-max-bs-decode"
    assert capabilities("0.5.10").cuda_graph_max_bs_flag == "--cuda-graph-max-bs"
    assert capabilities(None).assumed and capabilities(None).version == "0.5.23"
    assert parse_version("0.5.10rc1") == (0, 5, 10)
    with pytest.raises(ValueError):
        capabilities("nope")


def _fake_python(path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_detect_version_runs_the_interpreter_once(tmp_path):
    clear_cache()
    counter = tmp_path / "count"
    py = _fake_python(tmp_path / "python", f'echo x >> "{counter}"\necho 0.5.4.post1')
    assert detect_version(py) == "0.5.4.post1"
    assert detect_version(py) == "0.5.4.post1"
    assert counter.read_text().count("x") == 1  # cached
    bad = _fake_python(tmp_path / "python-nosglang", "echo 'PackageNotFoundError' >&2\nexit 1")
    assert detect_version(bad) is None
    assert detect_version(str(tmp_path / "missing-python")) is None
    slow = _fake_python(tmp_path / "python-slow", "sleep 5\necho 0.5.4")
    assert detect_version(slow, timeout_s=0.5) is None
    clear_cache()


@pytest.mark.parametrize("field, value", [("baseline_tok_s", "inf"), ("baseline_tok_s", "nan"),
                                          ("mem_fraction_static", "nan")])
def test_nan_and_inf_are_not_numbers_a_server_config_takes(field, value):
    text = f'[[server]]\nname = "s"\nmodel_path = "/m"\n{field} = {value}\n'
    with pytest.raises(ConfigError, match=rf"{field}.*finite number"):
        parse_config(text)
