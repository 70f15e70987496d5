"""A trainer that really trains an EAGLE-3 draft, on machines with or without a GPU.

A small fixed target network (:mod:`.target`, seeded weights, a byte tokenizer) gives the aux hidden
states and logits; an EAGLE-3-shaped draft head (:mod:`.draft`) learns them with SpecForge's test-time
training.  The command line takes SpecForge Gen-2 ``scripts/train_eagle3.py``'s flags (:mod:`.args`),
prints Gen-2's log lines (:mod:`.logio`) and writes Gen-2's checkpoint folders (:mod:`.checkpoint`), so
the log parsers, checkpoint inspection, preflight and deploy flow run on it as on a real SpecForge run::

    python -m backend.train.tiny make-target DIR [--size tiny|large] [--seed N]
    python -m backend.train.tiny make-data FILE.jsonl [--rows N] [--seed N]
    python -m backend.train.tiny draft-config TARGET_DIR [--out FILE]
    python -m backend.train.tiny train --target-model-path DIR --train-data-path DATA.jsonl \\
        --output-dir OUT [Gen-2 flags] [--device auto|cpu|cuda] [--size tiny|large]
"""
