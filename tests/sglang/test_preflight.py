"""Preflight on realistic target/draft folders made by the tests."""

from __future__ import annotations

import json
import socket

import pytest

from backend.sglang.preflight import has_errors, port_is_free, run_preflight
from backend.sim.models import make_draft_dir, make_target_dir

from .conftest import GiB, eight_gpus, port_free, server_cfg


def codes(findings, severity=None):
    return [f.code for f in findings if severity is None or f.severity == severity]


def run(cfg, **kw):
    kw.setdefault("gpu_probe", eight_gpus())
    kw.setdefault("port_probe", port_free)
    return run_preflight(cfg, **kw)


def test_llama_eagle3_correct_has_no_errors(llama):
    f = run(server_cfg(llama["target"], llama["draft"]))
    assert not has_errors(f), [str(x) for x in f if x.severity == "error"]
    aux = [x for x in f if x.code == "aux-layers-default"]
    assert aux and "[2, 16, 29]" in aux[0].found and "[1, 15, 28]" in aux[0].found


def test_kimi_eagle3_correct_has_no_errors(kimi):
    f = run(server_cfg(kimi["target"], kimi["draft"], tp_size=8))
    assert not has_errors(f), [str(x) for x in f if x.severity == "error"]
    aux = [x for x in f if x.code == "aux-layers"]
    assert aux and "[2, 30, 58]" in aux[0].found and "[3, 31, 59]" in aux[0].found


def test_seeds_mistake_eagle_with_eagle3_draft_is_an_error_naming_widths(kimi):
    f = run(server_cfg(kimi["target"], kimi["draft"], algorithm="EAGLE", tp_size=8))
    errs = [x for x in f if x.severity == "error"]
    assert [x.code for x in errs] == ["eagle3-draft-with-eagle"]
    e = errs[0]
    words = e.found + " " + e.fix
    for needle in ("EAGLE3", "--speculative-algorithm EAGLE ", "7168", "21504", "[2, 30, 58]", "accept_len",
                   "1.0", "fc"):
        assert needle in words, needle
    assert e.field == "speculative.algorithm"
    assert f[0] is e  # errors sort first


def test_nextn_alias_with_eagle3_draft_is_the_same_error(kimi):
    f = run(server_cfg(kimi["target"], kimi["draft"], algorithm="nextn", tp_size=8))
    assert "eagle3-draft-with-eagle" in codes(f, "error")


def test_eagle1_draft_with_eagle3_is_an_error(llama):
    d = make_draft_dir(llama["root"] / "eagle1", kind="eagle", target_hidden_size=4096)
    f = run(server_cfg(llama["target"], d, algorithm="EAGLE3"))
    assert "eagle-draft-with-eagle3" in codes(f, "error")
    ok = run(server_cfg(llama["target"], d, algorithm="EAGLE"))
    assert "eagle-draft-with-eagle3" not in codes(ok)


def test_wrong_fc_width_names_both_widths(llama):
    # a draft trained for a 7168-wide target, served on the 4096-wide Llama
    d = make_draft_dir(llama["root"] / "wrong-fc", target_hidden_size=4096, fc_in_features=3 * 7168)
    f = run(server_cfg(llama["target"], d))
    err = [x for x in f if x.code == "fc-width"]
    assert err and err[0].severity == "error"
    assert "21504" in err[0].found and "12288" in err[0].found and "7168" in err[0].found


def test_missing_d2t_is_an_error(llama):
    d = make_draft_dir(llama["root"] / "no-d2t", target_hidden_size=4096, with_d2t=False)
    f = run(server_cfg(llama["target"], d))
    assert "d2t-missing" in codes(f, "error")
    d2 = make_draft_dir(llama["root"] / "no-t2d", target_hidden_size=4096, with_t2d=False)
    f2 = run(server_cfg(llama["target"], d2))
    assert "t2d-missing" in codes(f2, "info") and not has_errors(f2)


def test_vocab_mismatch(llama):
    d = make_draft_dir(llama["root"] / "qwen-vocab", target_hidden_size=4096, vocab_size=151936)
    assert "vocab-size" in codes(run(server_cfg(llama["target"], d)), "error")


def test_aux_layer_ids_outside_target(kimi):
    d = make_draft_dir(kimi["root"] / "bad-aux", target_hidden_size=7168, vocab_size=163840,
                       eagle_aux_hidden_state_layer_ids=[2, 30, 60])
    f = run(server_cfg(kimi["target"], d, tp_size=8))
    err = [x for x in f if x.code == "aux-layer-range"]
    assert err and "[60]" in err[0].found and "61" in err[0].found


def test_draft_layer_count_depends_on_version(llama):
    d = make_draft_dir(llama["root"] / "two-layer", target_hidden_size=4096, num_hidden_layers=2)
    assert "draft-layers" in codes(run(server_cfg(llama["target"], d)), "error")
    assert "draft-layers" not in codes(run(server_cfg(llama["target"], d, sglang_version="0.5.23")))


def test_steps_topk_rules(llama):
    t, d = llama["target"], llama["draft"]
    f = run(server_cfg(t, d, speculative={"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 8}))
    w = [x for x in f if x.code == "draft-tokens-adjusted"]
    assert w and w[0].severity == "warning" and "= 4" in w[0].found
    f = run(server_cfg(t, d, speculative={"num_steps": None, "eagle_topk": 4, "num_draft_tokens": None}))
    assert "spec-params-partial" in codes(f, "error")
    f = run(server_cfg(t, d, speculative={"num_steps": None, "eagle_topk": None, "num_draft_tokens": None}))
    auto = [x for x in f if x.code == "spec-params-auto"]
    assert auto and "steps=5, topk=4, draft tokens=8" in auto[0].found  # Llama on 0.5.10


def test_topk_with_paged_attention_depends_on_version_and_backend(llama):
    spec = {"num_steps": 5, "eagle_topk": 4, "num_draft_tokens": 8}
    t, d = llama["target"], llama["draft"]
    f = run(server_cfg(t, d, speculative=spec, page_size=16, attention_backend="triton"))
    assert "topk-paged-backend" in codes(f, "error")  # 0.5.10: flashinfer, fa3 only
    f = run(server_cfg(t, d, speculative=spec, page_size=16, attention_backend="triton", sglang_version="0.5.23"))
    assert "topk-paged-backend" not in codes(f)
    f = run(server_cfg(t, d, speculative=spec, page_size=16, sglang_version="0.4.6"))
    assert "topk-paged-forced" in codes(f, "warning")


def test_paths_missing_and_hub_ids(llama):
    f = run(server_cfg(llama["root"] / "nope", llama["draft"]))
    assert "model_path-missing" in codes(f, "error")
    cfg = server_cfg(llama["target"], None).model_copy(
        update={"model_path": "meta-llama/Llama-3.1-8B-Instruct"})
    f = run(cfg)
    assert "model_path-not-local" in codes(f, "warning")


def test_eagle3_without_draft_path(llama):
    assert "draft-path-missing" in codes(run(server_cfg(llama["target"], None)), "error")


def test_corrupt_draft_config_names_file_and_line(llama):
    (llama["draft"] / "config.json").write_text('{\n  "architectures": ["LlamaForCausalLMEagle3"],\n  "hidden_size": ,\n}')
    f = run(server_cfg(llama["target"], llama["draft"]))
    err = [x for x in f if x.code == "draft-config"]
    assert err and "config.json:3" in err[0].found


def test_bad_field_type_names_the_field(llama):
    cfg = json.loads((llama["draft"] / "config.json").read_text())
    cfg["draft_vocab_size"] = "32000"
    (llama["draft"] / "config.json").write_text(json.dumps(cfg, indent=2))
    f = run(server_cfg(llama["target"], llama["draft"]))
    err = [x for x in f if x.code == "draft-config"]
    assert err and "draft_vocab_size" in err[0].found and "config.json:" in err[0].found


def test_truncated_safetensors_header(llama):
    p = llama["draft"] / "model.safetensors"
    with open(p, "rb") as fh:
        head = fh.read(100)
    p.write_bytes(head)
    f = run(server_cfg(llama["target"], llama["draft"]))
    w = [x for x in f if x.code == "draft-weights-unread"]
    assert w and "model.safetensors" in w[0].found


def test_port_busy_with_the_real_bind_probe(llama):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        assert port_is_free("127.0.0.1", port) is False
        f = run_preflight(server_cfg(llama["target"], llama["draft"], port=port), gpu_probe=eight_gpus())
        assert "port-busy" in codes(f, "error")
    finally:
        s.close()
    assert port_is_free("127.0.0.1", port) is True


def test_gpus(llama):
    t, d = llama["target"], llama["draft"]
    f = run(server_cfg(t, d), gpu_probe=lambda: None)
    assert "no-gpu-driver" in codes(f, "warning") and not has_errors(f)
    f = run(server_cfg(t, d, gpus=[6, 9], tp_size=2))
    err = [x for x in f if x.code == "gpu-missing"]
    assert err and "[9]" in err[0].found
    f = run(server_cfg(t, d, mem_fraction_static=0.85), gpu_probe=eight_gpus(free_gib=30.0))
    mem = [x for x in f if x.code == "gpu-memory"]
    assert mem and "30.0 GiB free" in mem[0].found and "68.0 GiB" in mem[0].found


def test_weights_too_big_for_the_gpus(tmp_path):
    t = make_target_dir(tmp_path / "big", hidden_size=4096, num_hidden_layers=32)
    with open(t / "model.safetensors", "wb") as fh:  # sparse 100 GiB weights
        fh.truncate(100 * GiB)
    d = make_draft_dir(tmp_path / "d", target_hidden_size=4096)
    f = run(server_cfg(t, d, tp_size=1))
    assert "weights-too-big" in codes(f, "error")
    f = run(server_cfg(t, d, tp_size=2, gpus=[0, 1]))
    assert "weights-too-big" not in codes(f)


def test_removed_flag_in_extra_args(llama):
    f = run(server_cfg(llama["target"], llama["draft"], sglang_version="0.5.23",
                       extra_args=["--cuda-graph-max-bs-decode", "8", "--cuda-graph-max-bs", "8"]))
    (r,) = [x for x in f if x.code == "argv-rejected"]
    assert "ambiguous option: --cuda-graph-max-bs could match" in r.found and r.severity == "error"
    f = run(server_cfg(llama["target"], llama["draft"], sglang_version="0.5.4",
                       extra_args=["--cuda-graph-max-bs", "8"]))
    assert "argv-rejected" not in codes(f)


def test_algorithm_not_in_old_version(llama):
    f = run(server_cfg(llama["target"], llama["draft"], algorithm="STANDALONE", sglang_version="0.4.10"))
    assert "algorithm-unsupported" in codes(f, "error")


@pytest.mark.parametrize("version,assumed_severity", [(None, "warning")])
def test_unknown_version_is_reported(llama, version, assumed_severity):
    cfg = server_cfg(llama["target"], llama["draft"]).model_copy(update={"sglang_version": None,
                                                                        "python": "/nonexistent/python"})
    f = run(cfg)
    assert "version-unknown" in codes(f, assumed_severity)
    assert "python-missing" in codes(f, "error")
