"""A trainer that really trains an EAGLE-3 draft, on machines with or without a GPU.

A small fixed target network (:mod:`.target`, seeded weights, a byte tokenizer) gives the aux hidden
states and logits; an EAGLE-3-shaped draft head (:mod:`.draft`) learns them with SpecForge's test-time
training.  The command line takes SpecForge Gen-2 ``scripts/train_eagle3.py``'s flags (:mod:`.args`),
prints Gen-2's log lines (:mod:`.logio`) and writes Gen-2's checkpoint folders (:mod:`.checkpoint`), so
the log parsers, checkpoint inspection, preflight and deploy flow run on it as on a real SpecForge run::

    python -m backend.flows.tiny make-target DIR [--size tiny|large] [--seed N]
    python -m backend.flows.tiny make-data FILE.jsonl [--rows N] [--seed N]
    python -m backend.flows.tiny draft-config TARGET_DIR [--out FILE]
    python -m backend.flows.tiny train --target-model-path DIR --train-data-path DATA.jsonl \\
        --output-dir OUT [Gen-2 flags] [--device auto|cpu|cuda] [--size tiny|large]

A demo-size run (tiny target, 200 conversations, 150 steps at about five a second on one CPU thread, about
40 s from start to exit by ``perf/bench_tiny_train.py``)::

    python -m backend.flows.tiny make-target models/tiny-target
    python -m backend.flows.tiny make-data data/tiny-train.jsonl
    python -m backend.flows.tiny train --target-model-path models/tiny-target \
        --train-data-path data/tiny-train.jsonl --output-dir outputs/tiny-eagle3 --num-epochs 3 \
        --batch-size 4 --max-length 128 --learning-rate 1e-2 --log-interval 10 --save-interval 50

On one H200, ``--size large --device cuda`` (hidden 1024, 16 target layers) with ``--batch-size 32`` runs seven to
eleven steps a second with the GPU 60-80 % busy (``perf/bench_tiny_train.py``, two sessions).
"""
