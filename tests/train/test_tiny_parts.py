"""The tiny trainer's parts: tqdm's bar text, SpecForge's vocab mapping, the chat template's loss mask, the
flags it refuses, the draft configs and checkpoints it rejects (each naming the file and field), and its target
folder read as preflight reads a real target."""

from __future__ import annotations

import io
import json
import shutil

import pytest

from backend.regen.output import RunFiles, validate
from backend.modelinfo import read_target
from backend.train.checkpoints import inspect_checkpoint
from backend.flows.checkpoint_check import preflight_checkpoint
from backend.flows.tiny.__main__ import main
from backend.flows.tiny.demo_data import write_demo_data
from backend.flows.tiny.logio import Bar


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_bar_text_is_tqdms():
    # expected lines: tqdm 4.70's format_meter for the same counts, times and postfix, written out
    out, clock = io.StringIO(), Clock()
    bar = Bar("Training Epoch 0", 15, out, clock=clock)
    bar.set_postfix({"loss": "1.11", "acc": "0.34"})
    clock.t += 0.5
    bar.update()
    draws = out.getvalue().split("\r")[1:]
    assert draws == [
        "Training Epoch 0:   0%|          | 0/15 [00:00<?, ?it/s]",
        "Training Epoch 0:   0%|          | 0/15 [00:00<?, ?it/s, loss=1.11, acc=0.34]",
        "Training Epoch 0:   7%|▋         | 1/15 [00:00<00:07,  2.00it/s, loss=1.11, acc=0.34]",
    ]
    out2, clock2 = io.StringIO(), Clock()
    slow = Bar("Training Epoch 0", 15, out2, clock=clock2, initial=3)
    slow.set_postfix({"loss": "1.11"})
    clock2.t += 2.0
    slow.update()
    clock2.t += 7.0
    slow.close()
    assert out2.getvalue().split("\r")[1:] == [
        "Training Epoch 0:  20%|██        | 3/15 [00:00<?, ?it/s]",
        "Training Epoch 0:  20%|██        | 3/15 [00:00<?, ?it/s, loss=1.11]",
        "Training Epoch 0:  27%|██▋       | 4/15 [00:02<00:22,  2.00s/it, loss=1.11]",
        "Training Epoch 0:  27%|██▋       | 4/15 [00:09<00:22,  2.00s/it, loss=1.11]\n",
    ]


def test_vocab_mapping_is_specforges():
    from backend.flows.tiny.tokenizer import Sample, vocab_mapping

    # loss-masked counts: 5 three times, 7 and 9 twice, 2 once; 4 is never masked in
    s = [Sample((5, 5, 7, 9, 4), (1, 1, 1, 1, 0)), Sample((5, 9, 7, 2, 4), (1, 1, 1, 1, 0))]
    m = vocab_mapping(s, vocab_size=12, draft_vocab_size=3)
    assert m.d2t.tolist() == [5, 6, 7]  # draft ids 0, 1, 2 are target ids 5, 7, 9
    assert m.t2d.nonzero().flatten().tolist() == [5, 7, 9]
    assert m.top_ratio == 7 / 8
    big = vocab_mapping(s, vocab_size=12, draft_vocab_size=6)  # only 4 seen: ids 0 and 1 fill it up
    assert big.draft_ids.tolist() == [0, 1, 2, 5, 7, 9] and big.d2t.tolist() == [0, 0, 0, 2, 3, 4]
    assert big.top_ratio == 1.0


def test_loss_mask_covers_the_assistant_replies():
    from backend.flows.tiny.tokenizer import decode, encode_chat

    conv = [("system", "be brief"), ("user", "hello there"), ("assistant", "the model"),
            ("user", "more"), ("assistant", "fast data")]
    s = encode_chat(conv, 512)
    learned = decode(t for t, m in zip(s.ids, s.loss_mask) if m)
    assert learned == "the model<|eot_id|>fast data<|eot_id|>"
    assert decode(s.ids).startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nbe brief")
    last = encode_chat(conv, 512, only_last_turn=True)
    assert decode(t for t, m in zip(last.ids, last.loss_mask) if m) == "fast data<|eot_id|>"
    cut = encode_chat(conv, 10)
    assert len(cut.ids) == 10 and len(cut.loss_mask) == 10


def test_demo_data_is_a_valid_regeneration_output(tmp_path):
    out = write_demo_data(tmp_path / "demo.jsonl", rows=30)
    v = validate(RunFiles.of(out), expected={f"demo-train-{i:04d}" for i in range(30)})
    assert (v.rows, v.assistant_messages, v.duplicates, v.missing, v.unknown) == (30, 30, 0, [], [])
    assert v.ok and v.problems == []


@pytest.fixture
def paths(tmp_path):
    from backend.flows.tiny.target import make_target

    target = make_target(tmp_path / "target", "tiny")
    data = write_demo_data(tmp_path / "data.jsonl", rows=8)
    return {"target": target, "data": data, "out": tmp_path / "out", "tmp": tmp_path}


def _argv(p, *extra):
    return ["train", "--target-model-path", str(p["target"]), "--train-data-path", str(p["data"]),
            "--output-dir", str(p["out"]), "--device", "cpu", "--batch-size", "4", "--max-length", "64",
            "--ttt-length", "2", "--num-epochs", "1", "--learning-rate", "1e-2", *extra]


@pytest.mark.parametrize("extra, message", [
    (["--tp-size", "2"], "--tp-size 2: only 1 is supported (the target runs on one device in this process)"),
    (["--report-to", "wandb"], "--report-to wandb: only 'tensorboard'"),
    (["--train-hidden-states-path", "/x"], "--train-hidden-states-path: offline training from prepared hidden"),
    (["--lk-loss-type", "alpha"], "--lk-loss-type: only SpecForge's default soft cross-entropy loss"),
    (["--resume", "--ckpt-dir", "/x"], "--resume and --ckpt-dir: give one"),
    (["--ttt-length", "0"], "argument --ttt-length: '0' must be greater than 0"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_flags_it_cannot_honour_are_refused(paths, capsys, extra, message):
    with pytest.raises(SystemExit) as exc:
        main(_argv(paths, *extra))
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
    assert not paths["out"].exists()


def test_a_draft_config_that_does_not_fit_names_file_line_and_field(paths, capsys):
    cfg = paths["tmp"] / "draft.json"
    main(["draft-config", str(paths["target"]), "--out", str(cfg)])
    good = json.loads(cfg.read_text())
    assert good["architectures"] == ["LlamaForCausalLMEagle3"] and good["draft_vocab_size"] == 528
    bad = dict(good, hidden_size=128)
    cfg.write_text(json.dumps(bad, indent=2))
    line = cfg.read_text().splitlines().index('  "hidden_size": 128,') + 1
    assert main(_argv(paths, "--draft-model-config", str(cfg))) == 1
    assert (f"{cfg}:{line}: field 'hidden_size' is 128 but the target's is 64 (the draft reads the target's "
            "token embedding)") in capsys.readouterr().err
    bad = dict(good, eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 5]})
    cfg.write_text(json.dumps(bad, indent=2))
    line = next(i for i, t in enumerate(cfg.read_text().splitlines(), 1) if "eagle_aux_hidden_state_layer_ids" in t)
    assert main(_argv(paths, "--draft-model-config", str(cfg))) == 1
    assert (f"{cfg}:{line}: field 'eagle_config.eagle_aux_hidden_state_layer_ids' is [1, 2, 5]; give three "
            "different layers in 0..4 (the target has 6)") in capsys.readouterr().err


def test_target_folder_reads_as_preflight_reads_a_target(paths, capsys):
    info = read_target(paths["target"])
    assert (info.hidden_size, info.num_hidden_layers, info.vocab_size) == (64, 6, 2112)
    assert (paths["target"] / "tokenizer.json").is_file()
    assert main(_argv(paths, "--size", "large")) == 1
    assert "--size large: " in capsys.readouterr().err
    assert main(["make-target", str(paths["target"])]) == 0  # the same target again: nothing changes
    assert main(["make-target", str(paths["target"]), "--size", "large"]) == 1
    assert (f"{paths['target'] / 'config.json'}: already there and not the large target with seed 0"
            in capsys.readouterr().err)
    assert read_target(paths["target"]).hidden_size == 64
    fresh = paths["tmp"] / "made-on-the-fly"  # --size writes the target where there is none
    assert main(_argv(dict(paths, target=fresh, out=paths["tmp"] / "fresh-out"), "--size", "tiny",
                      "--max-num-steps", "1")) == 0
    assert read_target(fresh).hidden_size == 64 and (paths["tmp"] / "fresh-out" / "epoch_0_step_1").is_dir()
    other = paths["tmp"] / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 8}))
    p = dict(paths, target=other)
    assert main(_argv(p)) == 1
    assert "field 'architectures' is ['LlamaForCausalLM']; this trainer drafts only for its own" in \
        capsys.readouterr().err


def test_broken_checkpoints_are_reported_by_inspection_and_refused_by_resume(paths, capsys):
    import torch
    from safetensors.torch import load_file, save_file

    assert main(_argv(paths, "--max-num-steps", "2")) == 0
    good = paths["out"] / "epoch_0_step_2"
    assert inspect_checkpoint(good).notes == ()
    capsys.readouterr()
    assert main(_argv(paths, "--resume", "--max-num-steps", "2", "--num-epochs", "2")) == 0  # no step more
    assert "Nothing left to train: step 2 of 4" in capsys.readouterr().err
    assert sorted(p.name for p in paths["out"].glob("epoch_*")) == ["epoch_0_step_2"]
    tensors = load_file(str(good / "model.safetensors"))
    narrow = paths["tmp"] / "narrow" / "epoch_0_step_2"
    shutil.copytree(good, narrow)
    save_file(dict(tensors, **{"fc.weight": torch.zeros(64, 128)}), str(narrow / "model.safetensors"))
    codes = {f.code for f in preflight_checkpoint(narrow, paths["target"]) if f.severity == "error"}
    assert codes == {"fc-width", "fc-config-mismatch"}  # 128 inputs: neither 3 x 64 nor what config.json says
    no_d2t = paths["tmp"] / "no-d2t" / "epoch_0_step_2"
    shutil.copytree(good, no_d2t)
    save_file({k: v for k, v in tensors.items() if k != "d2t"}, str(no_d2t / "model.safetensors"))
    info = inspect_checkpoint(no_d2t)
    assert not info.has_d2t and info.has_t2d
    assert "no d2t tensor: draft token ids cannot be mapped to target ids" in info.notes
    assert "d2t-missing" in {f.code for f in preflight_checkpoint(no_d2t, paths["target"]) if f.severity == "error"}
    capsys.readouterr()
    assert main(_argv(dict(paths, out=narrow.parent), "--resume")) == 1
    assert (f"{narrow / 'model.safetensors'}: fc.weight has shape [64, 128], this draft's is [64, 192]"
            in capsys.readouterr().err)
    assert main(_argv(dict(paths, out=no_d2t.parent), "--resume")) == 1
    assert "tensors do not match this draft (missing ['d2t'], unexpected none)" in capsys.readouterr().err
    torn = paths["tmp"] / "torn" / "epoch_0_step_2"
    shutil.copytree(good, torn)
    (torn / "training_state.pt").write_bytes((good / "training_state.pt").read_bytes()[:100])
    # a torn checkpoint is passed over (a resume takes the newest good one); with none good it starts over
    assert main(_argv(dict(paths, out=torn.parent), "--resume", "--max-num-steps", "1")) == 0
    err = capsys.readouterr().err
    assert f"Checkpoint {torn} cannot be resumed from (torn or incomplete): {torn / 'training_state.pt'}: cannot be read" in err
    assert f"No checkpoint in {torn.parent} can be resumed from (1 torn or incomplete: epoch_0_step_2); starting from step 0" in err


def test_an_output_folder_that_cannot_be_made_is_one_line(paths, capsys):
    blocker = paths["tmp"] / "a-file"
    blocker.write_text("not a folder")
    assert main(_argv(dict(paths, out=blocker / "out"))) == 1
    assert f"ERROR - {blocker / 'out'}: Not a directory" in capsys.readouterr().err


def test_a_stop_during_evaluation_cuts_it_short_and_saves_the_step(paths, capsys, monkeypatch):
    import torch

    import os
    import signal

    import backend.flows.tiny.loop as loop

    forward = loop._forward

    def term_in_eval(run, samples, ttt_length):
        if not torch.is_grad_enabled():  # the evaluation's first batch: the supervisor's SIGTERM comes
            monkeypatch.setattr(loop, "_forward", forward)
            os.kill(os.getpid(), signal.SIGTERM)
        return forward(run, samples, ttt_length)
    monkeypatch.setattr(loop, "_forward", term_in_eval)
    before = signal.getsignal(signal.SIGTERM)
    assert main(_argv(paths, "--eval-data-path", str(paths["data"]), "--eval-interval", "1")) == 0
    err = capsys.readouterr().err
    assert "Evaluation at step 1 cut short by SIGTERM; no eval metrics" in err
    assert "Stopping at step 1 on SIGTERM" in err and "Eval - Step" not in err
    assert sorted(p.name for p in paths["out"].glob("epoch_*")) == ["epoch_0_step_1"]
    assert signal.getsignal(signal.SIGTERM) is before  # the trainer's handler is gone again


def test_running_out_of_device_memory_is_one_line(paths, capsys, monkeypatch):
    import torch

    import backend.flows.tiny.loop as loop

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB\nmore detail")
    monkeypatch.setattr(loop, "train", oom)
    assert main(_argv(paths)) == 1
    assert ("ERROR - Out of device memory (CUDA out of memory. Tried to allocate 8.00 GiB); lower --batch-size "
            f"or --max-length, then --resume from the last checkpoint in {paths['out']}") in capsys.readouterr().err


def test_unusable_data_is_a_clear_error(paths, capsys):
    assert main(_argv(dict(paths, data=paths["tmp"] / "missing.jsonl"))) == 1
    assert f"{paths['tmp'] / 'missing.jsonl'}: training data file not found" in capsys.readouterr().err
    only_prompts = paths["tmp"] / "prompts.jsonl"
    only_prompts.write_text('{"id": "a", "prompt": "hello"}\n{"id": "b", "conversations": [{"from": "robot"}]}\n')
    assert main(_argv(dict(paths, data=only_prompts))) == 1
    err = capsys.readouterr().err
    assert ("no conversation with an assistant reply to train on (1 without one within --max-length 64; 1 "
            "unusable, the first: prompts.jsonl:2: conversations[0].role: unknown role 'robot')") in err
