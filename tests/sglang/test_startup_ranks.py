"""Start-up progress through graph capture when several ranks log it: each rank prints its own
begin and end lines, in any interleaving, while only rank 0 prints the batch counter.

The fixtures are real log lines quoted in public SGLang issues (URL above each); only the width of
a tqdm bar is written with a repeat.  A capture counts once however many ranks report it, and the
end of the draft's capture completes the graph phase, on whichever rank it is logged."""

from __future__ import annotations

import pytest

from backend.sglang.ingest import LogIngester
from backend.sglang.logparse import Phase

BAR = "█" * 40

# https://github.com/sgl-project/sglang/issues/10088 (8 GPUs, EAGLE, FA3): the target's capture
# ends on TP0, the draft's on TP6
ISSUE_10088 = [
    "[2025-09-05 20:48:29 TP0] Capture cuda graph end. Time elapsed: 12.11 s. mem usage=0.54 GB. avail mem=16.74 GB.",
    "[2025-09-05 20:50:29 TP6] Capture draft cuda graph end. Time elapsed: 62.67 s. mem usage=0.21 GB. "
    "avail mem=15.31 GB.",
]

# https://github.com/sgl-project/sglang/issues/6891 (DeepSeek R1 with MTP, DP attention, 8 ranks):
# the target's capture ends, the draft worker initialises and loads (earlier phases' lines), then
# the draft's capture begins on two ranks and ends on all eight around the memory summary
ISSUE_6891 = [
    f"Capturing batches (avail_mem=14.86 GB): 100%|{BAR}| 9/9 [00:13<00:00,  1.52s/it]",
    "[2025-06-05 08:20:21 DP0 TP0] Capture cuda graph end. Time elapsed: 14.02 s. mem usage=0.60 GB. "
    "avail mem=14.80 GB.",
    "[2025-06-05 08:20:21 DP0 TP0] MLA optimization is turned on. Use flashinfer backend.",
    "[2025-06-05 08:20:21 DP0 TP0] Chunked prefix cache is turned on.",
    "[2025-06-05 08:20:21 DP0 TP0] Init torch distributed begin.",
    "[2025-06-05 08:20:21 DP0 TP0] Init torch distributed ends. mem usage=0.00 GB",
    "[2025-06-05 08:20:21 DP0 TP0] Load weight begin. avail mem=14.80 GB",
    "[2025-06-05 08:20:21 DP0 TP0] Detected fp8 checkpoint.",
    "[2025-06-05 08:20:26 DP0 TP0] Capture draft cuda graph begin. This can take up to several minutes. "
    "avail mem=13.51 GB",
    "[2025-06-05 08:20:26 DP0 TP1] Capture draft cuda graph begin. This can take up to several minutes. "
    "avail mem=13.53 GB",
    f"Capturing batches (avail_mem=13.51 GB): 100%|{BAR}| 9/9 [00:05<00:00,  1.52it/s]",
    "[2025-06-05 08:20:32 DP0 TP0] Capture draft cuda graph end. Time elapsed: 6.28 s. avail mem=13.51 GB. "
    "mem usage=0.01 GB.",
    "[2025-06-05 08:20:32 DP0 TP0] max_total_num_tokens=191728, chunked_prefill_size=1024, "
    "max_prefill_tokens=16384, max_running_requests=1, context_len=163840",
    "[2025-06-05 08:20:32 DP2 TP5] Capture draft cuda graph end. Time elapsed: 6.32 s. avail mem=13.50 GB. "
    "mem usage=0.00 GB.",
    "[2025-06-05 08:20:32 DP3 TP6] Capture draft cuda graph end. Time elapsed: 6.31 s. avail mem=13.48 GB. "
    "mem usage=0.01 GB.",
    "[2025-06-05 08:20:32 DP0 TP1] Capture draft cuda graph end. Time elapsed: 6.33 s. avail mem=13.52 GB. "
    "mem usage=0.00 GB.",
]

# https://github.com/sgl-project/sglang/pull/11716 (TP8): the target's capture begins on each rank
PR_11716 = [
    "[2025-10-16 09:06:22 TP6] Memory pool end. avail mem=11.87 GB",
    "[2025-10-16 09:06:22 TP7] Capture cuda graph begin. This can take up to several minutes. avail mem=12.01 GB",
    "[2025-10-16 09:06:22 TP2] Capture cuda graph begin. This can take up to several minutes. avail mem=11.78 GB",
    "[2025-10-16 09:06:22 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=11.82 GB",
    "[2025-10-16 09:06:22 TP0] Capture cuda graph bs [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, "
    "104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256, 272, 288, "
    "304, 320, 336, 352, 368, 384, 400, 416, 432, 448, 464, 480, 496, 512]",
]


def _feed(lines):
    ing = LogIngester("/nonexistent/srv.log")
    seen = []
    for line in lines:
        ing.feed_lines([line])
        su = ing.startup
        seen.append((su.phase, su.percent, su.progress, su.detail))
    return ing, seen


def test_draft_capture_ending_on_another_rank_completes_graph_capture():
    ing, seen = _feed(ISSUE_10088)
    assert seen[0][0] == Phase.CUDA_GRAPH and seen[0][1] == pytest.approx(50.0)
    su = ing.startup
    assert su.phase == Phase.CUDA_GRAPH
    assert su.percent == 100.0, "the draft's capture ended: graph capture is complete"
    assert su.progress == pytest.approx(0.9)
    assert su.detail.startswith("Capture draft cuda graph end")


def test_mtp_log_with_dp_ranks_completes_graph_capture_at_the_draft_end():
    ing, seen = _feed(ISSUE_6891)
    phase, percent, _, detail = seen[1]
    assert (phase, percent) == (Phase.CUDA_GRAPH, pytest.approx(50.0)) and detail.startswith("Capture cuda graph end")
    # the draft worker's init and weight lines belong to earlier phases: nothing moves
    assert [s[:2] for s in seen[2:8]] == [(Phase.CUDA_GRAPH, pytest.approx(50.0))] * 6
    # two ranks begin the draft's capture: one step; rank 0's counter fills it
    assert seen[9][1] == pytest.approx(50.0) and seen[10][1] == pytest.approx(75.0)
    phase, percent, progress, detail = seen[11]
    assert (phase, percent) == (Phase.CUDA_GRAPH, 100.0) and detail.startswith("Capture draft cuda graph end")
    assert progress == pytest.approx(0.9)
    # the memory summary moves on; the other ranks' late ends change nothing
    assert ing.startup.phase == Phase.WARMUP and ing.startup.detail.startswith("max_total_num_tokens")
    progress = [s[2] for s in seen]
    assert progress == sorted(progress)


def test_begin_lines_of_every_rank_make_one_step():
    ing, _ = _feed(PR_11716)
    su = ing.startup
    assert su.phase == Phase.CUDA_GRAPH and su.percent == 0.0 and su.steps == 0
    assert su.detail.startswith("Capture cuda graph bs")
    assert su.captures_begun == {"target"}


def test_ranks_in_another_interleaving_count_each_capture_once():
    """The same real lines as ISSUE_6891, reordered as other ranks' timing could give: a rank's end
    of the draft's capture before rank 0's counter and end, and a slow rank's end of the target's
    capture after the draft's ended."""
    target_end, draft_begin, draft_counter, draft_end_0, draft_end_5 = (
        ISSUE_6891[1], ISSUE_6891[8], ISSUE_6891[10], ISSUE_6891[11], ISSUE_6891[13])
    slow_target_end = ISSUE_10088[0]
    ing, seen = _feed([ISSUE_6891[0], target_end, draft_begin, draft_end_5, draft_counter, draft_end_0,
                       slow_target_end])
    assert [s[1] for s in seen] == [pytest.approx(50.0), pytest.approx(50.0), pytest.approx(50.0), 100.0,
                                    100.0, 100.0, 100.0]
    # the first draft end, whatever its rank, is shown; rank 0's counter is shown after it; the later
    # ends of captures already counted are not
    assert seen[3][3].startswith("Capture draft cuda graph end. Time elapsed: 6.32 s")
    assert seen[4][3] == seen[5][3] == seen[6][3] == "capturing batches 9/9"
    assert ing.startup.captures_ended == {"target", "draft"}


def test_rank_zero_counter_after_another_ranks_end_does_not_start_a_new_step():
    """Written lines (the counter's counts between 0 and 9 do not appear in the real logs above)."""
    ing, seen = _feed([
        "[2025-06-05 08:20:08 DP0 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=15.4 GB",
        f"Capturing batches (avail_mem=14.90 GB):  44%|{BAR[:18]}| 4/9 [00:06<00:07,  1.52s/it]",
        "[2025-06-05 08:20:21 DP2 TP5] Capture cuda graph end. Time elapsed: 13.98 s. mem usage=0.60 GB. "
        "avail mem=14.81 GB.",
        f"Capturing batches (avail_mem=14.87 GB):  89%|{BAR[:36]}| 8/9 [00:12<00:01,  1.52s/it]",
        f"Capturing batches (avail_mem=14.86 GB): 100%|{BAR}| 9/9 [00:13<00:00,  1.52s/it]",
        "[2025-06-05 08:20:21 DP0 TP0] Capture cuda graph end. Time elapsed: 14.02 s. mem usage=0.60 GB. "
        "avail mem=14.80 GB.",
    ])
    assert [s[1] for s in seen] == [0.0, pytest.approx(50 * 4 / 9), 50.0, 50.0, 50.0, 50.0]
    assert ing.startup.steps == 1


@pytest.mark.parametrize("line, kind", [
    ("Capture cuda graph end. Time elapsed: 12.11 s.", "target"),
    ("Capture draft cuda graph begin. This can take up to several minutes.", "draft"),
    ("Capture draft extend cuda graph begin (step 2). avail mem=12.08 GB", "draft extend (2)"),
    ("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1", "target decode"),
    ("Capture target verify CUDA graph end. elapsed=2.27 s, mem usage=0.14 GB", "target verify"),
    ("Capture draft decode CUDA graph end. elapsed=0.98 s", "draft"),
    ("Capture draft prefill CUDA graph begin. backend=breakable", "draft prefill"),
    ("Capture draft extend cuda graph for adaptive state steps=3, draft_tokens=4 begin. avail mem=9.1 GB",
     "draft extend (steps=3, draft_tokens=4)"),
    ("Load weight end. type=LlamaForCausalLM", None),
])
def test_capture_kind(line, kind):
    from backend.sglang.startup import capture_kind

    assert capture_kind(line) == kind


def test_newest_format_reaches_complete_only_at_the_draft_decode_end():
    """0.5.23's begin/end pairs (target decode, target verify, draft prefill, draft decode, draft
    extend), as in the lines SGLang's 0.5.23 source writes (reference §6)."""
    lines = []
    for what in ("target decode", "target verify", "draft prefill", "draft decode", "draft extend"):
        lines.append(f"[2026-10-30 10:00:00 TP0] Capture {what} CUDA graph begin. backend=full, avail mem=40.0 GB")
        lines.append(f"[2026-10-30 10:00:01 TP0] Capture {what} CUDA graph end. elapsed=1.00 s, mem usage=0.1 GB, "
                     "avail mem=39.9 GB.")
    _, seen = _feed(lines)
    ends = [s[1] for s in seen[1::2]]
    assert ends == [pytest.approx(50.0), pytest.approx(75.0), pytest.approx(87.5), 100.0, 100.0]
