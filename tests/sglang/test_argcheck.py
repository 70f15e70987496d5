"""Preflight reads the launch command the way SGLang will: with SGLang 0.5.23's own parser
in the serving environment, or, without sglang, with Specdeck's flag table.

Each case runs in both modes; the expected messages are SGLang's own words (seen from
0.5.23's parser on a CPU machine) and the fields are those the extra argument names.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from backend.sglang import argcheck, argworker
from backend.sglang.preflight import has_errors, run_preflight
from backend.sglang.version import capabilities, clear_cache

from .conftest import eight_gpus, port_free, server_cfg

MODES = ("sglang", "table")


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture(scope="session")
def sglang_parser(serve_python) -> str:
    """The serving python, once it has shown it can run SGLang's parser (a broken environment
    is a clear failure here, not a puzzling assertion in every test)."""
    ans = argcheck.run_probe(str(serve_python), ["--model-path", "/m"], [])
    if ans.get("kind") != "parsed":
        pytest.fail(f"{serve_python} cannot run SGLang's argument parser ({ans.get('kind')}: {ans.get('error')}); "
                    "rebuild it from requirements-serve.txt (scripts/test does)")
    return str(serve_python)


@pytest.fixture
def python(mode, request) -> str:
    if mode == "sglang":
        return request.getfixturevalue("sglang_parser")
    return sys.executable  # Specdeck's own environment has no sglang


def preflight(llama, python, extra=(), **kw):
    kw.setdefault("sglang_version", "0.5.23")
    cfg = server_cfg(llama["target"], llama["draft"], python=python, extra_args=list(extra), **kw)
    return run_preflight(cfg, gpu_probe=eight_gpus(), port_probe=port_free)


def by_code(findings, code):
    return [f for f in findings if f.code == code]


def checked_by(mode: str) -> str:
    return ("checked by SGLang 0.5.23's own parser" if mode == "sglang"
            else "checked against Specdeck's flag table for SGLang 0.5.23")


def test_a_clean_eagle3_config_passes(llama, python, mode):
    f = preflight(llama, python)
    assert not has_errors(f), [str(x) for x in f if x.severity == "error"]
    assert not by_code(f, "sglang-version-mismatch")  # the config says 0.5.23, as installed
    (summary,) = by_code(f, "argv-checked")
    assert checked_by(mode) in summary.found
    assert "accepted, every typed field as configured" in summary.found
    if mode == "table":
        assert "sglang is not installed for" in summary.found


def test_typed_fields_reach_sglang_as_configured(llama, python):
    # every typed field the builder writes, read back by the parser: no mismatch, no override
    f = preflight(llama, python, trust_remote_code=True, mem_fraction_static=0.8, tp_size=2, gpus=[0, 1],
                  port=31234, served_model_name="llama", page_size=1, decode_log_interval=10,
                  cuda_graph={"max_bs": 16})
    assert not has_errors(f), [str(x) for x in f if x.severity == "error"]


def test_the_seeds_mistake_speculative_algo_eagle(llama, python, mode):
    f = preflight(llama, python, ["--speculative-algo", "EAGLE"])
    (o,) = by_code(f, "argv-override")
    assert o.severity == "error" and o.field == "extra_args"
    assert "`--speculative-algo EAGLE`" in o.found
    assert "speculative_algorithm to EAGLE" in o.found
    assert "speculative.algorithm = EAGLE3" in o.found
    assert "abbreviation of --speculative-algorithm" in o.found
    assert checked_by(mode) in o.found
    # what it means for this draft, and no false claim that SGLang refuses it
    (w,) = by_code(f, "eagle3-draft-with-eagle")
    assert w.found.startswith("With extra_args applied (--speculative-algo EAGLE)") and "accept_len" in w.found
    assert not any("ambiguous" in x.found for x in f)


def test_each_override_is_reported_and_only_speculative_ones_rerun_the_draft_checks(llama):
    f = preflight(llama, sys.executable, ["--tp", "2", "--speculative-algo", "EAGLE"])
    assert sorted(o.found.split(" sets ")[0] for o in by_code(f, "argv-override")) == [
        "extra_args `--speculative-algo EAGLE`", "extra_args `--tp 2`"]
    (w,) = by_code(f, "eagle3-draft-with-eagle")
    assert w.found.startswith("With extra_args applied (--speculative-algo EAGLE): ")


@pytest.mark.parametrize("extra, dest, config_field, typed, got", [
    (["--tp", "2"], "tp_size", "tp_size", "1", "2"),
    (["--tensor-parallel-size", "4"], "tp_size", "tp_size", "1", "4"),
    (["--speculative-num-step", "5"], "speculative_num_steps", "speculative.num_steps", "3", "5"),
    (["--speculative-eagle-topk", "4"], "speculative_eagle_topk", "speculative.eagle_topk", "1", "4"),
    (["--speculative-num-draft-tokens", "8"], "speculative_num_draft_tokens", "speculative.num_draft_tokens",
     "4", "8"),
    (["--speculative-draft-model", "/other/draft"], "speculative_draft_model_path",
     "speculative.draft_model_path", None, "/other/draft"),
    (["--model", "/other/model"], "model_path", "model_path", None, "/other/model"),
    (["--mem-frac", "0.5"], "mem_fraction_static", "mem_fraction_static", "unset", "0.5"),
    (["--port=31999"], "port", "port", "30000", "31999"),
    (["--host", "0.0.0.0"], "host", "host", "127.0.0.1", "0.0.0.0"),
    (["--trust-remote-code"], "trust_remote_code", "trust_remote_code", "false", "true"),
    (["--disable-cuda-graph"], "disable_cuda_graph", "cuda_graph.disable", "false", "true"),
    (["--cuda-graph-max-bs-decode", "8"], "cuda_graph_max_bs_decode", "cuda_graph.max_bs", "unset", "8"),
])
def test_each_override_is_an_error_naming_the_argument(llama, python, mode, extra, dest, config_field, typed, got):
    f = preflight(llama, python, extra)
    overrides = by_code(f, "argv-override")
    assert len(overrides) == 1, [str(x) for x in f]
    o = overrides[0]
    assert o.severity == "error"
    assert f"extra_args `{' '.join(extra)}` sets {dest} to {got}," in o.found
    if typed is not None:  # paths are the test's tmp folders
        assert f"replacing {config_field} = {typed} from the config" in o.found
    else:
        assert f"replacing {config_field} = " in o.found
    assert checked_by(mode) in o.found
    assert f"Remove `{' '.join(extra)}` from extra_args" in o.fix


@pytest.mark.parametrize("extra, message", [
    (["--cuda-graph-max-bs", "8"],
     "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
    (["--cuda-graph-bs", "1", "2", "4"],
     "ambiguous option: --cuda-graph-bs could match --cuda-graph-bs-decode, --cuda-graph-bs-prefill"),
    (["--speculative-draft", "/d"],
     "ambiguous option: --speculative-draft could match --speculative-draft-model-path, --speculative-draft-model, "
     "--speculative-draft-model-revision, --speculative-draft-load-format"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["--port", "eighty"], "argument --port: invalid int value: 'eighty'"),
])
def test_a_refused_command_is_an_error_in_sglangs_words(llama, python, mode, extra, message):
    f = preflight(llama, python, extra)
    (r,) = by_code(f, "argv-rejected")
    assert r.severity == "error"
    assert f"SGLang refuses the launch command: {message}" in r.found
    assert checked_by(mode) in r.found


def test_a_deprecated_extra_flag_is_an_info_in_plain_text(llama, python, mode):
    f = preflight(llama, python, ["--enable-dp-attention"])
    assert not has_errors(f), [str(x) for x in f if x.severity == "error"]
    (d,) = by_code(f, "flag-deprecated")
    assert d.severity == "info" and "--enable-dp-attention" in d.found and "deprecated" in d.found
    assert "\x1b" not in d.found  # SGLang colours the warning; the finding does not
    assert checked_by(mode) in d.found


def test_an_override_is_not_also_a_duplicate_warning(llama):
    f = preflight(llama, sys.executable, ["--speculative-num-steps", "5"])
    assert by_code(f, "argv-override") and not by_code(f, "flag-duplicate")
    same = preflight(llama, sys.executable, ["--speculative-num-steps", "3"])  # same value: no override
    assert not by_code(same, "argv-override") and by_code(same, "flag-duplicate")


def test_cuda_graph_max_bs_fix_points_at_the_config_field(llama, python):
    (r,) = by_code(preflight(llama, python, ["--cuda-graph-max-bs", "8"]), "argv-rejected")
    assert "cuda_graph.max_bs" in r.fix


def test_builder_for_an_older_version_is_refused_by_the_installed_one(llama, python):
    # the config says 0.5.10, so the builder writes --cuda-graph-max-bs; 0.5.23 refuses it
    f = preflight(llama, python, sglang_version="0.5.10", cuda_graph={"max_bs": 8})
    if python == sys.executable:
        assert not by_code(f, "argv-rejected")  # the table follows the configured version
        assert not by_code(f, "sglang-version-mismatch")
    else:
        (r,) = by_code(f, "argv-rejected")
        assert "--cuda-graph-max-bs could match" in r.found
        (m,) = by_code(f, "sglang-version-mismatch")
        assert "says 0.5.10" in m.found and "has sglang 0.5.23" in m.found and m.severity == "warning"


# -- the flag table's version differences (emulation only) ---------------------------

@pytest.mark.parametrize("version, outcome", [
    ("0.5.10", "accepted"),
    ("0.5.13", "accepted"),
    ("0.5.14", "deprecated"),
    ("0.5.19", "deprecated"),
    ("0.5.20", "ambiguous"),
    ("0.5.23", "ambiguous"),
])
def test_cuda_graph_max_bs_by_version_in_the_table(llama, version, outcome):
    f = preflight(llama, sys.executable, ["--cuda-graph-max-bs", "8"], sglang_version=version)
    rejected = by_code(f, "argv-rejected")
    deprecated = by_code(f, "flag-deprecated")
    if outcome == "ambiguous":
        assert rejected and "ambiguous option: --cuda-graph-max-bs" in rejected[0].found
    else:
        assert not rejected
        (o,) = by_code(f, "argv-override")  # it still replaces cuda_graph.max_bs (unset in the config)
        assert "cuda_graph.max_bs = unset" in o.found
        if outcome == "deprecated":
            assert deprecated and "use --cuda-graph-max-bs-decode" in deprecated[0].found
        else:
            assert not deprecated


def test_speculative_draft_prefix_is_unique_before_054(llama):
    old = preflight(llama, sys.executable, ["--speculative-draft", "/d"], sglang_version="0.4.10")
    assert not by_code(old, "argv-rejected")
    (o,) = by_code(old, "argv-override")
    assert "sets speculative_draft_model_path to /d" in o.found
    new = preflight(llama, sys.executable, ["--speculative-draft", "/d"], sglang_version="0.5.4")
    assert by_code(new, "argv-rejected")


def test_table_label_names_the_approximation():
    from backend.sglang.flagtable import table_label

    assert table_label(capabilities("0.5.23")) == "SGLang 0.5.23"
    assert "0.5.23's flags with the known differences of 0.5.10" in table_label(capabilities("0.5.10"))


# -- the subprocess: cached, falls back with the reason --------------------------------

def test_real_parser_runs_once_per_argv_in_one_warm_process(llama, serve_python):
    """The parser the module's earlier checks warmed (sglang_parser) is asked again, not started again: an
    import of SGLang's parser is 5-10 s of CPU.  Alone, the test starts it once."""
    argcheck.clear_cache()
    mine = argworker.existing(str(serve_python), {})
    if set(argworker.running()) != ({mine.proc.pid} if mine else set()):
        argworker.close_all()  # parsers of other interpreters (another module's tests): this one, or none
    warm = argworker.running()
    before = (argworker.stats.started, argworker.stats.requests)

    def counts():
        return argworker.stats.started - before[0], argworker.stats.requests - before[1]

    for _ in range(2):
        f = preflight(llama, str(serve_python), ["--tp", "2"])
        assert by_code(f, "argv-override")
    assert counts() == (0 if warm else 1, 1)  # the second check was answered from the cache
    (pid,) = argworker.running()
    assert not warm or warm == [pid]  # the warm one answered
    f = preflight(llama, str(serve_python), ["--tp", "4"])
    assert by_code(f, "argv-override") and "4" in by_code(f, "argv-override")[0].found
    assert counts() == (0 if warm else 1, 2) and argworker.running() == [pid]  # another argv: the same process
    argworker.close_all()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_broken_sglang_install_falls_back_to_the_table_and_says_why(llama, tmp_path):
    # sglang 0.5.23 "installed" (its metadata is there) but importing it fails
    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    meta = site / "sglang-0.5.23.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    py = _script(tmp_path / "python", f'PYTHONPATH="{site}" exec "{sys.executable}" "$@"')
    clear_cache()
    argcheck.clear_cache()
    f = preflight(llama, py, ["--tp", "2"])
    (w,) = by_code(f, "sglang-import-failed")
    assert w.severity == "warning" and "operator torchvision::nms does not exist" in w.found
    (s,) = by_code(f, "argv-checked")
    assert "checked against Specdeck's flag table for SGLang 0.5.23" in s.found
    assert "sglang 0.5.23 is installed for" in s.found and "its parser does not load" in s.found
    assert by_code(f, "argv-override")  # the table still catches --tp
    clear_cache()


def test_a_parser_that_does_not_answer_is_ended(llama, tmp_path):
    pidfile = tmp_path / "pid"
    version_cmd = "import importlib.metadata as m; print(m.version('sglang'))"
    py = _script(tmp_path / "python",
                 f'if [ "$2" = "{version_cmd}" ]; then echo 0.5.23; exit 0; fi\n'
                 f'echo $$ > "{pidfile}"\nexec sleep 60')
    clear_cache()
    argcheck.clear_cache()
    cfg = server_cfg(llama["target"], llama["draft"], python=py, sglang_version="0.5.23")
    check = argcheck.check_argv(cfg, capabilities("0.5.23"), timeout_s=1.0)
    assert check.checker == "table"
    assert "did not answer within 1 s" in check.fallback_reason
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # ended (and reaped) with its process group
    clear_cache()
