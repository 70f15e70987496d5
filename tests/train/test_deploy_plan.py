"""The deploy flow's pure parts: the load it measures at, the comparison row, the state file, the command."""

from __future__ import annotations

import json

import pytest

from backend.sglang.config import ServerConfig
from backend.flows.deploy import (DeployError, DeployRequest, DeployState, baseline_config, checkpoint_label, compare,
                                  deploy_config, plan_loads, read_state, speculative_values, stored_baselines,
                                  write_state)
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult

CKPT = "/runs/tiny/epoch_2_step_80"


def r(id, *, alg="NONE", tok=90.0, acc=None, c=1, i=64, o=32, n=20, t=0.0, server="srv", draft=None):
    return BenchResult(source="run", id=id, server=server, started_at=1000.0 + t,
                       config=BenchConfig(target_model="/m/target", algorithm=alg, draft_model=draft),
                       load=BenchLoad(concurrency=c, num_prompts=n, input_len=i, output_len=o),
                       results=BenchFigures(output_tok_s=tok, accept_len=acc))


def test_the_newest_baseline_gives_the_load():
    results = [r(1, c=1, i=64, o=32, t=0), r(2, c=4, i=128, o=64, n=50, t=10),
               r(3, alg="EAGLE3", c=8, t=20, acc=2.0), r(4, c=16, server="other", t=30)]
    baselines = stored_baselines(results, "srv", "/m/target")
    assert [b.id for b in baselines] == [2, 1]  # newest first; speculative and other servers' runs left out
    loads, where = plan_loads(DeployRequest(CKPT, "srv"), baselines)
    assert [(x.concurrency, x.num_prompts, x.input_len, x.output_len, x.baseline_id) for x in loads] == \
        [(4, 50, 128, 64, 2)]
    assert where == "the baseline's load (result #2): concurrency 4, 50 prompts of 128/64 tokens"


def test_an_explicit_load_finds_the_baseline_where_there_is_one():
    baselines = [r(7, c=4, i=128, o=64)]
    loads, where = plan_loads(DeployRequest(CKPT, "srv", concurrency=(1, 4), num_prompts=10), baselines)
    assert [(x.concurrency, x.num_prompts, x.input_len, x.output_len, x.baseline_id) for x in loads] == \
        [(1, 10, 128, 64, None), (4, 10, 128, 64, 7)]
    assert where.startswith("the load given: concurrency 1, 4")


def test_no_baseline_or_one_without_lengths_is_a_clear_error():
    with pytest.raises(DeployError, match="No baseline of server srv is stored") as exc:
        plan_loads(DeployRequest(CKPT, "srv"), [])
    assert exc.value.step == "load"
    csv_row = r(3, i=None, o=None)  # the demo history's rows: concurrency 1, lengths not recorded
    with pytest.raises(DeployError, match="does not record its input length and output length"):
        plan_loads(DeployRequest(CKPT, "srv"), [csv_row])
    # the lengths given fill what it lacks
    loads, _ = plan_loads(DeployRequest(CKPT, "srv", input_len=64, output_len=32), [csv_row])
    assert (loads[0].concurrency, loads[0].input_len, loads[0].output_len, loads[0].baseline_id) == (1, 64, 32, None)


def test_compare_pairs_the_baseline_at_the_same_load_and_the_previous_draft():
    new = r(10, alg="EAGLE3", tok=120.0, acc=2.4, draft=CKPT, t=100)
    stored = [
        r(1, tok=80.0, t=0), r(2, tok=90.0, t=5),  # baselines at this load: the newer one (90) counts
        r(3, tok=200.0, c=4, t=6),  # another load
        r(4, alg="EAGLE3", tok=82.3, acc=2.1, draft="/drafts/old", t=7),  # the previous draft
        r(5, alg="EAGLE3", tok=99.0, acc=2.2, draft=CKPT, t=8),  # this checkpoint, earlier: not "previous"
        r(6, alg="EAGLE3", tok=300.0, acc=3.0, draft="/drafts/x", server="other", t=9),
        new,
    ]
    row = compare(new, stored, CKPT)
    assert (row.baseline_id, row.baseline_tok_s, row.previous_id, row.previous_tok_s) == (2, 90.0, 4, 82.3)
    assert row.speedup == pytest.approx(120.0 / 90.0)
    assert row.previous_speedup == pytest.approx(82.3 / 90.0)
    assert row.previous_break_even_accept_len == pytest.approx(2.30, abs=0.005)  # the seeds' 2.3
    # a round: 2.4 / 120 s = 20 ms; a plain step 1 / 90 s = 11.1 ms: break-even 1.8, and 2.4 pays
    assert row.break_even_accept_len == pytest.approx(1.8) and row.pays is True
    assert "Break-even is accept_len 1.80" in row.explanation


def test_compare_without_a_baseline_says_why():
    new = r(10, alg="EAGLE3", tok=120.0, acc=2.4, draft=CKPT, c=2)
    row = compare(new, [r(1, c=1), new], CKPT)
    assert row.speedup is None and row.baseline_id is None
    assert "no baseline of srv is stored at concurrency 2 and 64/32 tokens" in row.reason


def test_configs_keep_everything_but_the_speculative_settings():
    cfg = ServerConfig.model_validate({"name": "srv", "model_path": "/m/target", "port": 31000, "tp_size": 2,
                                       "speculative": {"algorithm": "EAGLE3", "draft_model_path": "/drafts/old",
                                                       "num_steps": 5, "eagle_topk": 4, "num_draft_tokens": 8}})
    assert speculative_values(cfg, DeployRequest(CKPT, "srv")) == (5, 4, 8)
    assert speculative_values(cfg, DeployRequest(CKPT, "srv", num_steps=2, eagle_topk=1, num_draft_tokens=3)) == \
        (2, 1, 3)
    plain = ServerConfig.model_validate({"name": "srv", "model_path": "/m/target"})
    assert speculative_values(plain, DeployRequest(CKPT, "srv")) == (3, 1, 4)
    d = deploy_config(cfg, CKPT, 2, 1, 3)
    assert (d.speculative.algorithm, d.speculative.draft_model_path, d.speculative.num_steps,
            d.speculative.eagle_topk, d.speculative.num_draft_tokens) == ("EAGLE3", CKPT, 2, 1, 3)
    assert (d.port, d.tp_size, d.model_path) == (31000, 2, "/m/target")
    b = baseline_config(cfg)
    assert b.speculative.algorithm is None and b.speculative.draft_model_path is None and b.port == 31000


def test_checkpoint_label():
    assert checkpoint_label(CKPT, None, 2, 80) == "checkpoint tiny/epoch_2_step_80 (epoch 2, step 80)"
    assert checkpoint_label("/out/myrun-step100", "myrun", None, 100) == "checkpoint myrun/myrun-step100 (step 100)"


def test_state_file_round_trip_and_a_torn_file(tmp_path):
    st = DeployState(request=DeployRequest(CKPT, "srv", concurrency=(1, 4)).to_dict(), label="x")
    st.step("preflight").status = "failed"
    path = tmp_path / "s" / "state.json"
    write_state(path, st)
    back = read_state(path)
    assert back.step("preflight").status == "failed" and back.label == "x"
    assert DeployRequest.from_dict(back.request) == DeployRequest(CKPT, "srv", concurrency=(1, 4))
    assert [p.name for p in path.parent.iterdir()] == ["state.json"]  # no temporary file left
    path.write_text('{"request": {"checkpoint"')
    assert read_state(path) is None
    path.write_text(json.dumps({"other": 1}))
    assert read_state(path) is None


def test_the_supervised_command_line_parses_back_to_the_same_request(tmp_path):
    from backend.cli import build_parser
    from backend.cli.train import _request
    from backend.flows.deploy_job import deploy_process_spec

    class WS:
        root = tmp_path
        outputs_dir = tmp_path / "outputs"
        logs_dir = tmp_path / "logs"

    req = DeployRequest(checkpoint=CKPT, server="srv", num_steps=2, eagle_topk=1, num_draft_tokens=3,
                        concurrency=(1, 4), num_prompts=10, input_len=64, output_len=32, measure_baseline=True,
                        after="restore", mode="builtin", run_name="tiny", ready_timeout_s=300.0,
                        restore_timeout_s=900.0)
    spec, meta = deploy_process_spec(WS, req, "20260101-000000")
    assert spec.name == "deploy-srv-20260101-000000" and spec.restart.mode == "never"
    assert meta == {"kind": "deploy", "state": str(tmp_path / "outputs" / "deploy" / "srv-20260101-000000" /
                                                   "state.json"), "server": "srv", "checkpoint": CKPT}
    argv = list(spec.argv)
    args = build_parser().parse_args(argv[argv.index("--workspace"):])
    assert args.state_file == meta["state"]
    assert _request(args) == req


def test_measuring_a_baseline_needs_the_load(capsys):
    from backend.cli import main

    assert main(["train", "deploy", CKPT, "--server", "srv", "--measure-baseline"]) == 2
    assert "--measure-baseline needs the load to measure at" in capsys.readouterr().err
