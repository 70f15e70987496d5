"""A log is labelled with a SpecForge generation only from a line that generation alone prints.

SpecForge Gen-3's progress bar (``desc="Training"``, ``unit="step"``) is also what NeMo Automodel's
EAGLE-3 recipe draws, so a bar names no trainer: such a log is an "unknown trainer" until a SpecForge line
(Gen-3's ``step N: {…}`` dict, Gen-2's ``Eval - Step`` lines, Gen-1's epoch summaries) says otherwise.
"""

from __future__ import annotations

import io

from backend.cli import main as cli_main
from backend.train.reader import TrainLogReader, trainer_label

# NeMo Automodel (Apache-2.0), EAGLE-3 draft training, as posted in
# https://github.com/NVIDIA-NeMo/Automodel/pull/2959 : the tqdm bar and the recipe's log line share a line.
AUTOMODEL = (
    "Training:  59%|█████▉    | 38/64 [00:15<00:08,  3.07step/s, acc=0.0107, loss=8.2841, lr=4.47e-05, tau=1.03]"
    "2026-07-07 22:20:52 | INFO | __main__ | epoch=0 step=38 train_loss=8.284101 train_acc=0.010703 "
    "train_tau_sim=1.0328 lr=4.466e-05\n"
    "Training:  61%|██████    | 39/64 [00:15<00:08,  3.07step/s, acc=0.1136, loss=5.5930, lr=4.24e-05, tau=1.18]"
    "2026-07-07 22:20:53 | INFO | __main__ | epoch=0 step=39 train_loss=5.593010 train_acc=0.113579 "
    "train_tau_sim=1.1837 lr=4.242e-05\n"
)

GEN3_STEP = "step 40: {'loss': 2.31, 'acc': 0.52, 'acc_0': 0.61, 'lr': 0.0001}\n"


def test_automodels_eagle3_bar_is_an_unknown_trainer(tmp_path):
    log = tmp_path / "automodel.log"
    log.write_text(AUTOMODEL, encoding="utf-8")
    r = TrainLogReader(log)
    recs = r.read_all()
    bars = [x for x in recs if x.source == "bar"]
    assert [(b.step, b.metrics["acc"], b.generation) for b in bars] == [(38, 0.0107, None), (39, 0.1136, None)]
    assert r.generation is None
    assert trainer_label(r.generation) == "unknown trainer"
    assert (r.progress().step, r.progress().total_steps, r.progress().generation) == (39, 64, None)


def test_a_specforge_line_names_the_generation(tmp_path):
    log = tmp_path / "gen3.log"
    log.write_text("Training:  10%|█         | 39/390 [00:15<02:10,  2.70step/s]\n" + GEN3_STEP, encoding="utf-8")
    r = TrainLogReader(log)
    r.read_all()
    assert r.generation == 3
    assert trainer_label(r.generation) == "SpecForge Gen-3"


def test_parselog_says_which_trainer(tmp_path, capsys):
    log = tmp_path / "automodel.log"
    log.write_text(AUTOMODEL, encoding="utf-8")
    assert cli_main(["train", "parselog", str(log)], io.StringIO(), io.StringIO()) == 0
    assert capsys.readouterr().err.rstrip().endswith("; unknown trainer")
    log.write_text(AUTOMODEL + GEN3_STEP, encoding="utf-8")
    assert cli_main(["train", "parselog", str(log)], io.StringIO(), io.StringIO()) == 0
    assert capsys.readouterr().err.rstrip().endswith("; SpecForge Gen-3")
