"""Start-up progress through the newest SGLang log format: weights loaded by a thread pool, graphs
compiled and captured by token count, then by batch size for the target and the draft.

The line shapes are those of real 0.5.x start-up logs; the expected percents are written by hand
from the counts on each line and the shares of startup.FIRST_STEP_SHARE (weights: the first step
fills the phase; graphs: the first step takes half, each later one half of what is left)."""

from __future__ import annotations

import pytest

from backend.sglang.ingest import LogIngester
from backend.sglang.logparse import Phase

W, K, G, U, R = Phase.WEIGHTS, Phase.KV_CACHE, Phase.CUDA_GRAPH, Phase.WARMUP, Phase.READY

# (line, phase after it, phase percent after it, detail starts with)
SEQUENCE = [
    ("[2026-05-01 19:54:00] server_args=ServerArgs(model_path='/m', speculative_algorithm='EAGLE3')",
     Phase.LAUNCHED, None, "server arguments"),
    ("[2026-05-01 19:54:01 TP0] Load weight begin. avail mem=78.12 GB", W, 0.0, "Load weight begin"),
    ("Multi-thread loading shards:   0% Completed | 0/4 [00:00<?, ?it/s]", W, 0.0, "loading shards 0/4"),
    ("Multi-thread loading shards:  25% Completed | 1/4 [00:00<00:02,  1.40it/s]", W, 25.0, "loading shards 1/4"),
    ("Multi-thread loading shards:  75% Completed | 3/4 [00:02<00:00,  1.30it/s]", W, 75.0, "loading shards 3/4"),
    ("Multi-thread loading shards: 100% Completed | 4/4 [00:02<00:00,  1.77it/s]Multi-thread loading shards: 100% "
     "Completed | 4/4 [00:02<00:00,  1.58it/s]", W, 100.0, "loading shards 4/4"),
    ("[2026-05-01 19:54:03 TP0] Load weight end. elapsed=2.1 s, type=LlamaForCausalLM, avail mem=62.0 GB, "
     "mem usage=16.1 GB.", W, 100.0, "Load weight end"),
    # the draft's weights: the phase stays at 100, it does not start over
    ("[2026-05-01 19:54:03 TP0] Load weight begin. avail mem=62.0 GB", W, 100.0, "Load weight begin"),
    ("Multi-thread loading shards:   0% Completed | 0/1 [00:00<?, ?it/s]", W, 100.0, "loading shards 0/1"),
    ("[2026-05-01 19:54:05 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 413000, KV size: 25.2 GB",
     K, None, "KV Cache"),
    ("  0%|          | 0/58 [00:00<?, ?it/s]Compiling num tokens (num_tokens=8192):   0%|          | 0/58 "
     "[00:00<?, ?it/s]", G, 0.0, "compiling num tokens 0/58"),
    ("Compiling num tokens (num_tokens=7680):   3%|▎         | 2/58 [00:06<02:31,  2.71s/it]Compiling num tokens "
     "(num_tokens=7168):   3%|▎         | 2/58 [00:06<02:31,  2.71s/it]", G, 50 * 2 / 58, "compiling num tokens 2/58"),
    ("Compiling num tokens (num_tokens=4): 100%|██████████| 58/58 [00:10<00:00,  5.36it/s]", G, 50.0,
     "compiling num tokens 58/58"),
    ("  0%|          | 0/58 [00:00<?, ?it/s]Capturing num tokens (num_tokens=8192 avail_mem=23.21 GB):   0%|"
     "          | 0/58 [00:00<?, ?it/s]", G, 50.0, "capturing num tokens 0/58"),
    ("Capturing num tokens (num_tokens=7680 avail_mem=42.29 GB):   3%|▎         | 2/58 [00:01<00:40,  1.39it/s]",
     G, 50 + 25 * 2 / 58, "capturing num tokens 2/58"),
    ("Capturing num tokens (num_tokens=4 avail_mem=41.00 GB): 100%|██████████| 58/58 [00:20<00:00,  2.90it/s]",
     G, 75.0, "capturing num tokens 58/58"),
    ("[2026-05-01 19:55:08 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=40.4 GB",
     G, 75.0, "Capture cuda graph begin"),
    ("Capturing batches (bs=160 avail_mem=40.2 GB):  37%|███▋      | 13/35 [00:04<00:07,  2.9it/s]",
     G, 75 + 12.5 * 13 / 35, "capturing batches 13/35"),
    ("Capturing batches (bs=1 avail_mem=40.0 GB): 100%|██████████| 35/35 [00:10<00:00,  2.9it/s]", G, 87.5,
     "capturing batches 35/35"),
    ("[2026-05-01 19:55:20 TP0] Capture cuda graph end. Time elapsed: 12.1 s. mem usage=0.9 GB. avail mem=39.5 GB.",
     G, 87.5, "Capture cuda graph end"),
    # the draft's capture begins: the phase does not fall back to 0 %
    ("[2026-05-01 19:55:21 TP0] Capture draft cuda graph begin. This can take up to several minutes. "
     "avail mem=39.5 GB", G, 87.5, "Capture draft cuda graph begin"),
    ("Capturing batches (bs=8 avail_mem=39.4 GB):  50%|█████     | 2/4 [00:01<00:01,  2.0it/s]", G, 87.5 + 6.25 / 2,
     "capturing batches 2/4"),
    ("[2026-05-01 19:55:25 TP0] max_total_num_tokens=413000, chunked_prefill_size=8192, max_prefill_tokens=16384",
     U, None, "max_total_num_tokens"),
    ("[2026-05-01 19:55:30] The server is fired up and ready to roll!", R, 100.0, "The server is fired up"),
]


def test_progress_moves_through_weights_and_graph_capture_and_never_goes_back():
    ing = LogIngester("/nonexistent/srv.log")
    last = (None, -1.0, -1.0)
    for line, phase, percent, detail in SEQUENCE:
        ing.feed_lines([line])
        su = ing.startup
        assert su.phase == phase, line
        assert su.percent == (pytest.approx(percent) if percent is not None else None), line
        assert su.detail.startswith(detail), (su.detail, line)
        # within a phase the percent never goes down; the overall progress never goes down
        if su.phase == last[0] and su.percent is not None:
            assert su.percent >= last[1], line
        assert su.progress >= last[2], line
        last = (su.phase, su.percent if su.percent is not None else -1.0, su.progress)
    assert ing.startup.progress == 1.0 and ing.stats.event_lines == len(SEQUENCE)


@pytest.mark.parametrize("bulk", [True, False], ids=["vectorised", "per-line"])
def test_progress_seen_as_tqdm_writes_it_to_a_file(tmp_path, bulk):
    """tqdm starts each update with a carriage return and ends a bar with one newline; the newest update
    is read once the next one (or the newline) completes it."""
    log = tmp_path / "srv.log"
    ing = LogIngester(log, bulk=bulk)
    ing.bulk_min_bytes = 0
    with open(log, "w", encoding="utf-8") as fh:
        fh.write("[2026-05-01 19:54:05 TP0] KV Cache is allocated. #tokens: 413000, K size: 1 GB, V size: 1 GB\n")
        fh.write("".join(f"\rCompiling num tokens (num_tokens={8192 - i}): {100 * i // 58:3d}%|  | {i}/58 "
                         f"[00:0{i % 10}<00:10,  5.36it/s]" for i in range(0, 30)))
    ing.poll()
    su = ing.startup
    # 28 of 58 complete (29/58 waits for its line end); the first step of the graphs phase covers half of it
    assert su.phase == G and su.percent == pytest.approx(50 * 28 / 58) and su.detail == "compiling num tokens 28/58"
    with open(log, "a", encoding="utf-8") as fh:
        fh.write("".join(f"\rCompiling num tokens (num_tokens={8192 - i}): {100 * i // 58:3d}%|  | {i}/58 "
                         f"[00:1{i % 10}<00:00,  5.36it/s]" for i in range(30, 59)) + "\n")
        fh.write("\rCapturing num tokens (num_tokens=8192 avail_mem=23.21 GB):   0%|  | 0/58 [00:00<?, ?it/s]"
                 "\rCapturing num tokens (num_tokens=7680 avail_mem=23.20 GB):  50%|  | 29/58 [00:09<00:09,  3.1it/s]"
                 "\rCapturing num tokens (num_tokens=7168 avail_mem=23.19 GB):  51%|  | 30/58 [00:09<00:09,  3.1it/s]")
    ing.poll()
    su = ing.startup
    assert su.phase == G and su.percent == pytest.approx(62.5) and su.detail == "capturing num tokens 29/58"
