"""Servers › Relaunch… with an edited field, the way a user does it: open the panel, change one
field, relaunch, then check the workspace file, the new process's argv and that the (simulated)
server comes back RUNNING and ready.  Two workspaces: one whose ``[[server]]`` entry has the
optional ``[server.speculative]`` and ``[server.cuda_graph]`` tables (with comments), one without."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.flows.workspace import parse_config
from tests.helpers import close_runtime, free_port
from tests.simws import make_models

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "app_pages" / "servers.py")
K = "srv-f-sim-"

COMMENTS = ("# the target under test", "# drafts we are trying", "# small graphs for the demo box",
            "# keep some memory for the draft")


def _with_tables(root: Path, target: Path, draft: Path) -> str:
    return f"""# workspace for the relaunch test
[workspace]
name = "relaunch"

[telemetry]
source = "fake"

[[server]]
name = "sim"
model_path = "{target}"   # the target under test
port = {free_port()}
simulate = true
sglang_version = "0.5.10"
decode_log_interval = 5
mem_fraction_static = 0.8   # keep some memory for the draft
gpus = [0]
env = {{ SPECDECK_SIM_SPEED = "100" }}

[server.speculative]
# drafts we are trying
algorithm = "EAGLE3"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[server.cuda_graph]
max_bs = 16   # small graphs for the demo box
"""


def _without_tables(root: Path, target: Path, draft: Path) -> str:
    return f"""# workspace for the relaunch test
[workspace]
name = "relaunch"

[telemetry]
source = "fake"

[[server]]
name = "sim"
model_path = "{target}"   # the target under test
port = {free_port()}
simulate = true
sglang_version = "0.5.10"
decode_log_interval = 5
env = {{ SPECDECK_SIM_SPEED = "100" }}
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    def make(writer):
        target, draft = make_models(tmp_path / "m", draft="draft")
        (tmp_path / "specdeck.toml").write_text(writer(tmp_path, target, draft))
        monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
        return tmp_path, draft

    yield make
    close_runtime(tmp_path, source="teardown")


def _entry(root: Path) -> dict:
    text = (root / "specdeck.toml").read_text()
    parse_config(text, root / "specdeck.toml")  # the whole file still validates
    return tomllib.loads(text)["server"][0]


def _wait_ready(rt, old_run: str | None, deadline_s: float = 90.0):
    """The server's new run (not ``old_run``) is RUNNING and its /health answered after it started."""
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        v = rt.supervisor.view("sim")
        if v.state.value == "RUNNING" and v.run_id != old_run and v.started_at:
            h = rt.fleet.snapshot("sim").health
            if h is not None and h.ok and h.at >= v.started_at:
                return v
        time.sleep(0.1)
    v = rt.supervisor.view("sim")
    raise AssertionError(f"not ready in {deadline_s} s: {v.state.value} {v.detail} "
                         f"log: {Path(v.log_path).read_text()[-1500:] if Path(v.log_path).exists() else ''}")


def _memory_evidence(rt) -> dict:
    """What the fake GPUs list and what the supervisor manages, for a gpu-memory finding that should not be."""
    def proc(pid):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            return stat[stat.rfind(")") + 2:][:1] + " " + Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:120]
        except OSError as e:
            return repr(e)

    snap = rt.telemetry.latest()
    fake = getattr(rt.telemetry.adapter, "_lib", None)
    cache = getattr(fake, "_follow_cache", None)
    return {
        "views": [(v.name, v.state.value, v.pid, v.run_id, v.started_at) for v in rt.supervisor.views()],
        "holders": snap and snap.attribution and [(h.gpu_index, h.pid, h.job) for h in snap.attribution.holders],
        "snapshot_t": snap and snap.t, "now": time.time(),
        "follow_cache": cache and (time.monotonic() - cache[0], cache[1]),
        "procs": {pid: proc(pid) for procs in (cache[1].values() if cache else ()) for pid, _ in procs},
        "adapter_procs": {g: ([p.pid for p in (v[0] or ())], time.time() - v[1]) for g, v in
                          getattr(rt.telemetry.adapter, "_procs_cache", {}).items()},
        "probe_again": rt.gpu_probe(exclude="sim"),
    }


def _relaunch(at: AppTest, rt, edit) -> object:
    """Open the panel, apply ``edit(at)``, relaunch (ticking "launch anyway" when preflight asks)."""
    old_run = rt.supervisor.view("sim").run_id
    at.button(key="srv-launch").click().run()
    assert not at.exception, at.exception
    edit(at)
    at.run()
    assert not at.exception, at.exception
    assert not [e.value for e in at.error if "not valid" in e.value], "the form refused the edit"
    # the server's own memory is free again once it is replaced: never a gpu-memory error here, however
    # recently the previous relaunch changed its pid (the fake GPUs hold 61.5 GiB per server)
    reserved = [e.value for e in at.error if "mem_fraction_static" in e.value and "reserves" in e.value]
    assert not reserved, f"{reserved}\n{_memory_evidence(rt)}" if reserved else ""
    if any(c.key == "srv-anyway" for c in at.checkbox):
        at.checkbox(key="srv-anyway").check().run()
    go = at.button(key="srv-launch-go")
    assert not go.disabled
    go.click().run()
    assert not at.exception, at.exception
    assert not [e.value for e in at.error if "Could not launch" in e.value], [e.value for e in at.error]
    assert not any(b.key == "srv-launch-go" for b in at.button), (
        "the panel closes after a relaunch", [e.value for e in at.error], [w.value for w in at.warning])
    # the page's preflight is the launched config's own check, not one read while the old process lets go
    assert at.session_state["srv-preflight-sim"][0] == at.session_state["srv-launch-checked"][2]
    return _wait_ready(rt, old_run)


def _flag(argv, flag: str) -> str | None:
    argv = list(argv)
    return argv[argv.index(flag) + 1] if flag in argv else None


def _quick(rt) -> None:
    """The runtime's supervisor loop and the server's monitor at test pace (a relaunch is seen
    RUNNING and its /health answered within a few tenths of a second, not seconds)."""
    rt.loop.interval_s = 0.1
    mon = rt.fleet.monitor("sim")
    mon.poll_interval_s, mon.http_interval_s = 0.1, 0.2


def _start(rt) -> AppTest:
    _quick(rt)
    rt.start("sim", actor="tester", source="test", force=True)
    _wait_ready(rt, None)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    return at


def _text(root: Path) -> str:
    return (root / "specdeck.toml").read_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_relaunch_with_each_field_edited_on_a_workspace_with_the_optional_tables(ws):
    root, _draft = ws(_with_tables)
    rt = runtime_mod.get_runtime()
    at = _start(rt)

    def check(v, key_path, value, flag=None, flag_value=None):
        e = _entry(root)
        for k in key_path[:-1]:
            e = e[k]
        assert e.get(key_path[-1]) == value, (key_path, e)
        text = _text(root)
        for c in COMMENTS:
            assert c in text, f"comment lost: {c!r}\n{text}"
        if flag:
            assert _flag(v.spec.argv, flag) == flag_value, v.spec.argv

    v = _relaunch(at, rt, lambda a: a.selectbox(key=K + "algo").select("EAGLE"))
    check(v, ("speculative", "algorithm"), "EAGLE", "--speculative-algorithm", "EAGLE")
    v = _relaunch(at, rt, lambda a: a.selectbox(key=K + "algo").select("EAGLE3"))
    check(v, ("speculative", "algorithm"), "EAGLE3", "--speculative-algorithm", "EAGLE3")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "steps").set_value(4))
    check(v, ("speculative", "num_steps"), 4, "--speculative-num-steps", "4")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "dtok").set_value(5))
    check(v, ("speculative", "num_draft_tokens"), 5, "--speculative-num-draft-tokens", "5")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "topk").set_value(2))
    check(v, ("speculative", "eagle_topk"), 2, "--speculative-eagle-topk", "2")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "maxbs").set_value(8))
    check(v, ("cuda_graph", "max_bs"), 8, "--cuda-graph-max-bs", "8")
    v = _relaunch(at, rt, lambda a: a.checkbox(key=K + "nograph").check())
    check(v, ("cuda_graph", "disable"), True)
    assert "--disable-cuda-graph" in v.spec.argv and "--cuda-graph-max-bs" not in v.spec.argv
    v = _relaunch(at, rt, lambda a: a.checkbox(key=K + "nograph").uncheck())
    check(v, ("cuda_graph", "disable"), False, "--cuda-graph-max-bs", "8")
    assert "--disable-cuda-graph" not in v.spec.argv
    # 0.85 and 0.9 of a 140.4 GiB GPU need the 61.5 GiB the running server holds
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "mem").set_value(0.85))
    check(v, ("mem_fraction_static",), 0.85, "--mem-fraction-static", "0.85")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "mem").set_value(0.9))
    check(v, ("mem_fraction_static",), 0.9, "--mem-fraction-static", "0.9")
    v = _relaunch(at, rt, lambda a: a.text_input(key=K + "gpus").input("1,2"))
    check(v, ("gpus",), [1, 2])
    assert v.spec.env["CUDA_VISIBLE_DEVICES"] == "1,2"
    v = _relaunch(at, rt, lambda a: a.text_input(key=K + "extra").input("--chunked-prefill-size 4096"))
    check(v, ("extra_args",), ["--chunked-prefill-size", "4096"], "--chunked-prefill-size", "4096")
    # every earlier edit is still in the file, and in the running server's command
    e = _entry(root)
    assert e["speculative"] == {"algorithm": "EAGLE3", "draft_model_path": e["speculative"]["draft_model_path"],
                                "num_steps": 4, "eagle_topk": 2, "num_draft_tokens": 5}
    assert e["cuda_graph"] == {"max_bs": 8, "disable": False}
    assert _flag(v.spec.argv, "--speculative-num-steps") == "4"
    at.run()
    assert not at.exception, at.exception
    assert rt.fleet.snapshot("sim").status == "ready"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_relaunch_with_each_field_edited_on_a_workspace_without_the_optional_tables(ws):
    root, draft = ws(_without_tables)
    rt = runtime_mod.get_runtime()
    at = _start(rt)
    assert "[server.speculative]" not in _text(root) and "[server.cuda_graph]" not in _text(root)

    def check(v, key_path, value, flag=None, flag_value=None):
        e = _entry(root)
        for k in key_path[:-1]:
            e = e[k]
        assert e.get(key_path[-1]) == value, (key_path, e)
        assert "# the target under test" in _text(root)
        if flag:
            assert _flag(v.spec.argv, flag) == flag_value, v.spec.argv

    # an algorithm needs its draft: the one edit that sets two fields
    v = _relaunch(at, rt, lambda a: (a.selectbox(key=K + "algo").select("EAGLE3"),
                                     a.text_input(key=K + "draft").input(str(draft))))
    check(v, ("speculative", "algorithm"), "EAGLE3", "--speculative-algorithm", "EAGLE3")
    assert _entry(root)["speculative"] == {"algorithm": "EAGLE3", "draft_model_path": str(draft)}
    assert "[server.cuda_graph]" not in _text(root)  # nothing to say about CUDA graphs yet
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "steps").set_value(3))
    check(v, ("speculative", "num_steps"), 3, "--speculative-num-steps", "3")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "topk").set_value(1))
    check(v, ("speculative", "eagle_topk"), 1, "--speculative-eagle-topk", "1")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "dtok").set_value(4))
    check(v, ("speculative", "num_draft_tokens"), 4, "--speculative-num-draft-tokens", "4")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "maxbs").set_value(8))
    check(v, ("cuda_graph", "max_bs"), 8, "--cuda-graph-max-bs", "8")
    assert _entry(root)["cuda_graph"] == {"max_bs": 8}  # created with the real value only
    v = _relaunch(at, rt, lambda a: a.checkbox(key=K + "nograph").check())
    check(v, ("cuda_graph", "disable"), True)
    assert "--disable-cuda-graph" in v.spec.argv
    v = _relaunch(at, rt, lambda a: a.checkbox(key=K + "nograph").uncheck())
    check(v, ("cuda_graph", "disable"), False, "--cuda-graph-max-bs", "8")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "mem").set_value(0.85))
    check(v, ("mem_fraction_static",), 0.85, "--mem-fraction-static", "0.85")
    v = _relaunch(at, rt, lambda a: a.number_input(key=K + "mem").set_value(0.9))
    check(v, ("mem_fraction_static",), 0.9, "--mem-fraction-static", "0.9")
    v = _relaunch(at, rt, lambda a: a.text_input(key=K + "gpus").input("0"))
    check(v, ("gpus",), [0])
    assert v.spec.env["CUDA_VISIBLE_DEVICES"] == "0"
    v = _relaunch(at, rt, lambda a: a.text_input(key=K + "extra").input("--chunked-prefill-size 2048"))
    check(v, ("extra_args",), ["--chunked-prefill-size", "2048"], "--chunked-prefill-size", "2048")
    # untouched defaults were never written into the file
    e = _entry(root)
    for untouched in ("tp_size", "host", "enable_metrics"):
        assert untouched not in e, (untouched, e)
    at.run()
    assert not at.exception, at.exception
    assert rt.fleet.snapshot("sim").status == "ready"


@pytest.mark.timeout(120)
def test_a_form_value_that_is_not_valid_is_shown_and_nothing_is_written(ws):
    root, _draft = ws(_with_tables)
    before = _text(root)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    at.button(key="srv-launch").click().run()
    at.text_input(key=K + "gpus").input("0,x").run()
    assert not at.exception, at.exception
    assert any("gpus" in e.value and "not valid" in e.value for e in at.error)
    assert not any(b.key == "srv-launch-go" for b in at.button)
    at.text_input(key=K + "gpus").input("0").run()
    at.number_input(key=K + "tp").set_value(2).run()  # two-way TP on one GPU
    assert any("tp_size 2 needs at least 2 GPUs" in e.value for e in at.error)
    assert _text(root) == before


@pytest.mark.timeout(120)
def test_the_panel_lists_what_the_edit_changes_before_the_relaunch(ws):
    root, _draft = ws(_with_tables)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    at.button(key="srv-launch").click().run()
    assert any(m.value == "**Changes:** none (relaunch as it is)" for m in at.markdown)
    at.number_input(key=K + "steps").set_value(4).run()
    at.checkbox(key=K + "nograph").check().run()
    at.text_input(key=K + "extra").input("--chunked-prefill-size 4096").run()
    assert not at.exception, at.exception
    changes = next(m.value for m in at.markdown if m.value.startswith("**Changes:**"))
    assert changes == ("**Changes:** `speculative.num_steps` 3 → 4; `cuda_graph.disable` False → True; "
                       "`extra_args` none → --chunked-prefill-size 4096")


GiB = 1024 ** 3
SERVER_MEM = 61 * GiB + 512 * 1024 ** 2


@pytest.mark.timeout(60)
def test_preflight_counts_a_just_relaunched_servers_own_memory_as_free(ws, monkeypatch):
    """Right after a relaunch the telemetry's process list (read every 5 s) still names the server's
    previous pid while the memory figures already count the new one: the probe for a relaunch reads
    the GPUs afresh, so the server's memory is its own, not someone else's."""
    from backend.telemetry.fake import FakeNvml
    from backend.telemetry.nvml import NvmlAdapter
    from backend.telemetry.sampler import Sampler

    ws(_with_tables)
    rt = runtime_mod.get_runtime()
    fake = FakeNvml(gpus=2)
    managed = [("sim", "server", 3_999_001)]
    # the join with the managed processes runs on its own timer; here it falls due before the process
    # list does, as it does when a relaunch lands just after a join
    sampler = Sampler(NvmlAdapter(fake, source="fake"), managed=lambda: list(managed), attribution_interval_s=0.0)
    rt.telemetry.stop()
    rt.telemetry = sampler
    fake.set_processes(0, [(3_999_001, SERVER_MEM)])
    sampler.sample_once()  # the process list is read: the server's first pid holds 61.5 GiB of GPU 0
    total = fake.nvmlDeviceGetMemoryInfo(fake.nvmlDeviceGetHandleByIndex(0)).total

    # relaunched: the same memory now held by a new pid; the background pass reads memory, not processes
    managed[0] = ("sim", "server", 3_999_002)
    fake.set_processes(0, [(3_999_002, SERVER_MEM)])
    stale = sampler.sample_once()
    assert [p.pid for p in stale.gpus[0].processes] == [3_999_001]  # what the old probe worked from
    # the old pid left the managed list: still the server's while the GPUs (here the stale list) name it
    assert [(j.name, j.pids) for j in stale.attribution.jobs] == [("sim", (3_999_001,))]
    sampler.gone_keep_s = 0.0  # past that limit, nobody's: 61.5 GiB "in use" by the stale list
    stale = sampler.sample_once()
    assert [j.name for j in stale.attribution.jobs] == []

    gpus = {i: (t, free) for i, t, free in rt.gpu_probe(exclude="sim")}
    assert gpus[0][0] == total
    assert gpus[0][1] > 0.99 * total  # all but the driver's own 0.6 GiB
    assert gpus[0][1] >= 0.9 * total  # so mem_fraction_static 0.9 fits
    # without exclude the server's memory is in use, as it is
    assert {i: f for i, _t, f in rt.gpu_probe()}[0] < total - SERVER_MEM + GiB
    # and a preflight of the relaunch finds no gpu-memory error
    cfg = rt.fleet.config("sim").model_copy(update={"mem_fraction_static": 0.9})
    monkeypatch.setattr(rt.fleet, "_running", lambda name: True)  # it runs now (this test starts no process)
    assert "gpu-memory" not in [f.code for f in rt.fleet.preflight("sim", cfg)]


def test_config_changes_lists_each_edited_field_with_its_old_and_new_value():
    from backend.sglang.config import ServerConfig, config_changes

    old = ServerConfig(name="a", model_path="/m", port=30000)
    new = old.model_copy(update={"port": 30001, "extra_args": ["--x", "1"]})
    assert config_changes(old, old) == []
    assert config_changes(old, new) == [("port", 30000, 30001), ("extra_args", [], ["--x", "1"])]
