"""The per-line parser on each SpecForge generation's console lines (reference specforge.md §2), written
by hand from the formats SpecForge prints; expected values are read off the lines."""

from __future__ import annotations

import time

import pytest

from backend.train.logparse import BadTrainLine, check_value, parse_line, strip_prefix


def one(line: str):
    recs = parse_line(line)
    assert len(recs) == 1, recs
    return recs[0]


# -- Gen-1: per-epoch summaries -------------------------------------------------------------------

@pytest.mark.parametrize("line, split, epoch, pos, name, value", [
    ("Train Epoch [6/6], position 0,  Acc: 0.68", "train", 5, 0, "acc_0", 0.68),
    ("Train Epoch [6/6], position 6,  Acc: 0.53", "train", 5, 6, "acc_6", 0.53),
    ("Train Epoch [6/6], position 0, pLoss: 0.49", "train", 5, 0, "ploss_0", 0.49),
    ("Eval Epoch [1/6], position 2,  Acc: 0.41", "eval", 0, 2, "acc_2", 0.41),
])
def test_gen1_epoch_lines(line, split, epoch, pos, name, value):
    r = one(line)
    assert (r.kind, r.source, r.generation) == ("metrics", "epoch_line", 1)
    assert (r.split, r.epoch, r.position, r.step) == (split, epoch, pos, None)
    assert r.metrics == {name: value}
    assert r.info["num_epochs"] == 6


def test_gen1_bar_as_an_operator_saw_it():
    r = one("Training Epoch 0:  27%|▌ | 457/1667 [09:28<21:09,  1.05s/it, loss=1.11, acc=0.34]")
    assert (r.source, r.epoch, r.split) == ("bar", 0, "train")
    assert r.metrics == {"loss": 1.11, "acc": 0.34}
    assert r.elapsed_s == 9 * 60 + 28
    assert r.info["remaining_s"] == 21 * 60 + 9
    assert r.info["n"] == 457 and r.info["total"] == 1667
    assert r.info["s_per_it"] == 1.05


def test_gen1_epoch_out_of_range_is_rejected():
    with pytest.raises(BadTrainLine, match="epoch"):
        parse_line("Train Epoch [7/6], position 0,  Acc: 0.68")


# -- Gen-2: tqdm bars, Eval - Step lines, start-up / resume / checkpoint lines ----------------------

def test_gen2_bar_with_full_postfix():
    r = one("Training Epoch 3:  42%|████▏     | 700/1667 [1:02:03<1:26:11,  5.35s/it, loss=2.07, acc=0.58, "
            "acceptance_rate=0.49, time=5.35s, grad_norm=0.87]")
    assert r.epoch == 3
    assert r.metrics == {"loss": 2.07, "acc": 0.58, "acceptance_rate": 0.49, "step_time_s": 5.35, "grad_norm": 0.87}
    assert r.elapsed_s == 3600 + 2 * 60 + 3
    assert r.info["remaining_s"] == 3600 + 26 * 60 + 11


def test_gen2_v020_bar_without_acceptance_rate_and_an_it_per_s_rate():
    r = one("Training Epoch 0:   3%|▎         | 50/1667 [00:20<10:50,  2.50it/s, loss=6.33, acc=0.05, time=0.40s]")
    assert r.metrics == {"loss": 6.33, "acc": 0.05, "step_time_s": 0.40}
    assert r.info["s_per_it"] == pytest.approx(0.4)


def test_bar_at_start_has_no_metrics():
    r = one("Training Epoch 0:   0%|          | 0/1667 [00:00<?, ?it/s]")
    assert (r.kind, r.metrics, r.info["n"], r.elapsed_s, r.info["remaining_s"]) == ("progress", {}, 0, 0, None)


def test_evaluation_bar_is_eval():
    r = one("Evaluating Epoch 1: 100%|██████████| 50/50 [00:10<00:00,  4.90it/s]")
    assert (r.split, r.epoch, r.info["n"], r.info["total"]) == ("eval", 1, 50, 50)


def test_bar_cut_short_is_rejected():
    with pytest.raises(BadTrainLine, match="cut short"):
        parse_line("Training Epoch 0:  27%|▌ | 457/1667 [09:28<21:09,  1.05s/it, loss=1.1")


def test_bar_past_its_total_is_rejected():
    with pytest.raises(BadTrainLine, match="past its total"):
        parse_line("Training Epoch 0: 100%|██| 1700/1667 [09:28<00:00,  1.05s/it]")


@pytest.mark.parametrize("line, pos, name, value", [
    ("Eval - Step 500 [501/10], position 0,  Acc: 0.71", 0, "acc_0", 0.71),
    ("Eval - Step 500 [501/10], position 3,  Acceptance Rate: 0.4412", 3, "acceptance_rate_3", 0.4412),
    ("Eval - Step 500 [501/10], position 6, pLoss: 1.8374512195587158", 6, "ploss_6", 1.8374512195587158),
])
def test_gen2_eval_step_lines(line, pos, name, value):
    r = one(line)
    assert (r.source, r.generation, r.step, r.position) == ("step_line", 2, 500, pos)
    assert r.metrics == {name: value}
    assert r.split is None  # the label says Eval for training metrics too; the reader decides


def test_timestamp_and_rank_prefixes():
    line = "[rank0]: 2026-03-20 10:00:01,250 - INFO - Eval - Step 50 [51/10], position 1,  Acc: 0.45"
    r = one(line)
    assert r.rank == 0
    assert r.wall_time == pytest.approx(time.mktime(time.strptime("2026-03-20 10:00:01", "%Y-%m-%d %H:%M:%S")) + 0.25)
    assert r.metrics == {"acc_1": 0.45}
    assert one("[default3]:Training Epoch 0:   0%|          | 0/10 [00:00<?, ?it/s]").rank == 3
    assert one("rank 2: Starting training from epoch:1          step:400").rank == 2


def test_bar_with_a_log_line_glued_on():
    recs = parse_line("Training Epoch 0:  51%|█████     | 51/100 [00:51<00:49,  1.00s/it, loss=4.12, "
                      "acc=0.31]"
                      "Eval - Step 60 [61/2], position 0,  Acc: 0.45")
    assert [r.source for r in recs] == ["bar", "step_line"]
    assert recs[0].metrics == {"loss": 4.12, "acc": 0.31}
    assert (recs[1].step, recs[1].metrics) == (60, {"acc_0": 0.45})


def test_terminal_escapes_are_ignored():
    r = one("\x1b[ATraining Epoch 2:  10%|█         | 10/100 [00:10<01:30,  1.00it/s, loss=3.00]\x1b[K")
    assert (r.epoch, r.metrics) == (2, {"loss": 3.0})


def test_startup_resume_and_checkpoint_lines():
    r = one("Auto-calculated total_steps: 16670 (num_epochs=10 * steps_per_epoch=1667)")
    assert (r.kind, r.info) == ("total_steps", {"total_steps": 16670, "num_epochs": 10, "steps_per_epoch": 1667})
    r = one("Starting training from epoch:0          step:0")
    assert (r.kind, r.epoch, r.step, r.info["resumed"]) == ("start", 0, 0, False)
    r = one("Starting training from epoch:2          step:3400")
    assert (r.epoch, r.step, r.info["resumed"]) == (2, 3400, True)
    r = one("Loaded training state from outputs/llama/epoch_1_step_3000: epoch=1, step=3000")
    assert (r.kind, r.epoch, r.step, r.info["path"]) == ("resume", 1, 3000, "outputs/llama/epoch_1_step_3000")
    r = one("Restored optimizer/scheduler state: epoch=1, step=3000, lr=9.5e-05")
    assert (r.kind, r.step, r.metrics) == ("resume", 3000, {"lr": 9.5e-05})
    r = one("Saved full training state to outputs/llama/epoch_1_step_3000/training_state.pt")
    assert (r.kind, r.info) == ("checkpoint", {"path": "outputs/llama/epoch_1_step_3000", "what": "training_state"})
    r = one("Saved model configuration to outputs/llama/epoch_1_step_3000")
    assert (r.kind, r.info["path"]) == ("checkpoint", "outputs/llama/epoch_1_step_3000")
    r = one("Training completed at step 16670, saving final checkpoint...")
    assert (r.kind, r.step) == ("completed", 16670)
    r = one("top 32000 token frequency ratio: 92.41%")
    assert (r.kind, r.info) == ("vocab", {"draft_vocab_size": 32000, "top_ratio_pct": 92.41})
    r = one("Saved vocab mapping to: cache/vocab_mapping/3b1f.pt")
    assert r.info == {"path": "cache/vocab_mapping/3b1f.pt"}
    r = one(" ttt_length ············ 7")
    assert (r.kind, r.info) == ("arg", {"key": "ttt_length", "value": "7"})


# -- Gen-3: step N: {...} --------------------------------------------------------------------------

GEN3 = ("step 200: {'acc_0': 0.62, 'acc_1': 0.48, 'ploss_0': 1.91, 'ploss_1': 2.4, 'acc': 0.55, 'loss': 3.83, "
        "'acceptance_rate_0': 0.57, 'acceptance_rate_1': 0.44, 'acceptance_rate': 0.505, 'lr': 9.9e-05, "
        "'perf/optimizer_steps_per_hour': 2400.0, 'perf/optimizer_step_time_s': 1.5, "
        "'perf/global_samples_per_second': 5.33}")


def test_gen3_step_dict():
    r = one(GEN3)
    assert (r.source, r.generation, r.step, r.split) == ("step_dict", 3, 200, "train")
    assert r.metrics == {"acc_0": 0.62, "acc_1": 0.48, "ploss_0": 1.91, "ploss_1": 2.4, "acc": 0.55, "loss": 3.83,
                         "acceptance_rate_0": 0.57, "acceptance_rate_1": 0.44, "acceptance_rate": 0.505,
                         "lr": 9.9e-05, "perf/optimizer_steps_per_hour": 2400.0,
                         "perf/optimizer_step_time_s": 1.5, "perf/global_samples_per_second": 5.33,
                         "step_time_s": 1.5}


def test_gen3_eval_keys_become_an_eval_record():
    recs = parse_line("step 1000: {'eval/avg_loss': 2.2, 'eval/avg_acc': 0.6, 'eval/simulated_acc_len': 1.9, "
                      "'eval/per_position_acc': [0.7, 0.5, 0.4]}")
    assert len(recs) == 1
    r = recs[0]
    assert (r.split, r.step) == ("eval", 1000)
    assert r.metrics == {"loss": 2.2, "acc": 0.6, "simulated_acc_len": 1.9, "acc_0": 0.7, "acc_1": 0.5, "acc_2": 0.4}


def test_gen3_bad_values_are_dropped_and_named():
    r = one("step 7: {'loss': nan, 'acc_0': 1.7, 'ploss_0': -0.2, 'lr': 1e-4, 'grad_norm': inf}")
    assert r.metrics == {"lr": 1e-4}
    assert sorted(r.rejected) == ["acc_0: 1.7 is outside 0..1", "grad_norm: inf is not a finite number",
                                  "loss: nan is not a finite number", "ploss_0: -0.2 is negative"]


def test_gen3_line_with_only_bad_values_is_unparsed():
    with pytest.raises(BadTrainLine, match="nan"):
        parse_line("step 7: {'loss': nan}")


@pytest.mark.parametrize("line, why", [
    ("step 5: {'loss': 1.0", "not closed"),
    ("step 5: {'loss': __import__('os')}", "cannot be read"),
    ("step 99999999999999999999: {'loss': 1.0}", "out of range"),
    ("Eval - Step 5 [6/1], position x,  Acc: 0.3", "Eval - Step"),
    ("Eval - Step 5 [6/1], position 2000,  Acc: 0.3", "position"),
    ("Eval - Step 5 [6/1], position 1,  Acc: １", "not a number"),
    ("Train Epoch [1/6], position 0,  Acc: 1e999", "not a finite number"),
])
def test_malformed_lines_say_why(line, why):
    with pytest.raises(BadTrainLine, match=why):
        parse_line(line)


@pytest.mark.parametrize("line", [
    "", "   ", "Traceback (most recent call last):", "  warnings.warn(", "loading ... done",
    "[rank0]: NCCL INFO Bootstrap : Using eth0", "Evaluating the model now",
])
def test_other_lines_are_not_training_lines(line):
    assert parse_line(line) == []


@pytest.mark.parametrize("name, value, ok", [
    ("acc_0", "1.00", 1.0), ("acc", "0", 0.0), ("loss", "0.00", 0.0), ("lr", "1e-4", 1e-4),
    ("step_time_s", "5.35s", 5.35), ("perf/x", "3", 3.0),
])
def test_check_value_accepts(name, value, ok):
    assert check_value(name, value) == ok


@pytest.mark.parametrize("name, value", [
    ("acc_0", "1.01"), ("loss", "-1"), ("lr", "-0.1"), ("grad_norm", "nan"), ("loss", "inf"), ("loss", "1.2.3"),
    ("loss", "0x10"), ("loss", "9" * 50), ("loss", 10 ** 30), ("loss", True), ("loss", None), ("acc", "-0.0001"),
])
def test_check_value_rejects(name, value):
    with pytest.raises(ValueError):
        check_value(name, value)


def test_strip_prefix():
    assert strip_prefix("[rank12]: hello") == ("hello", 12)
    assert strip_prefix("plain") == ("plain", None)


def test_gen3_dict_without_values_is_unparsed():
    for line in ("step 3: {}", "step 3: {'a': ()}", "step 3: {'acc': []}"):
        with pytest.raises(BadTrainLine, match="no metric value"):
            parse_line(line)


def test_tqdm_clock_reads_each_form_and_refuses_the_rest():
    """``_clock`` reads the plain forms without its regular expression; it must agree with that expression
    (1-6 digits per part, at most three parts, ASCII only, spaces around allowed) on any text."""
    import random

    from backend.train.logparse import _clock, _clock_by_expression

    assert _clock("09:28") == 568.0 and _clock("1:02:03") == 3723.0 and _clock("7") == 7.0
    assert _clock(" 00:05 ") == 5.0 and _clock("?") is None and _clock("1:2:3:4") is None
    assert _clock("1234567:00") is None and _clock("１２:00") is None and _clock(":05") is None
    rng = random.Random(7)
    alphabet = "0123456789:: ?٣x"
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 16)))
        assert _clock(text) == _clock_by_expression(text), repr(text)
