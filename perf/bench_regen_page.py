"""Benchmark: the Regeneration page on a run the size of the real one (83,288 rows).

    python perf/bench_regen_page.py [--rows 83288] [--answer-chars 3300] [--hours 50] [--dir /tmp] [--keep]

Writes, in a fresh workspace under ``--dir``: an input file, an output of ``--rows`` SpecForge rows
(about 350 MB at the default answer length), and a progress log of one snapshot every 2 s over
``--hours`` hours (10 datasets, 2 servers, a length histogram and error classes per line, as the job
writes them).  Then prints:

* the progress follower: first open of the log (sampled) and a refresh after one appended line
  (``poll`` + ETA), median of repeated refreshes, and the memory it holds (tracemalloc);
* the page's server time: AppTest runs of app_pages/regeneration.py, the first (cold: opens the log)
  and the following ones (warm), the median of the warm runs;
* the sample viewer's reads: the newest row, a step back, an id found in the 350 MB output, and its
  original found in the input;
* SpecForge mode: attaching to the same output as if SpecForge's script had written it (polls of a
  bounded number of bytes until caught up, and the memory its id sets hold);
* the process's peak resident memory.

The files are deleted at the end unless --keep is given.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DATASETS = ["stack-v2", "codesearchnet", "mceval", "multipl-e", "codeforces", "verifiable", "leetcode",
            "humaneval-x", "humaneval-xl", "swe-polybench"]


def write_inputs_and_output(root: Path, rows: int, answer_chars: int) -> tuple[Path, Path]:
    data = root / "datasets"
    data.mkdir(parents=True)
    out_dir = root / "outputs" / "regen"
    out_dir.mkdir(parents=True)
    inp, out = data / "mix.jsonl", out_dir / "big.jsonl"
    answer = ("def solve(xs):\n    return sorted(xs)  # regenerated\n" * (answer_chars // 52 + 1))[:answer_chars]
    prompt = ("Write a function that merges two sorted lists; explain its complexity. " * 8)
    a_json, p_json = json.dumps(answer), json.dumps(prompt)
    with open(inp, "w") as fi, open(out, "w") as fo:
        for i in range(rows):
            ds = DATASETS[i % len(DATASETS)]
            fi.write(f'{{"id": "r{i}", "conversations": [{{"role": "user", "content": {p_json}}}, '
                     f'{{"role": "assistant", "content": "original {i}"}}]}}\n')
            fo.write(f'{{"id": "r{i}", "status": "success", "regen": {{"server": "http://127.0.0.1:30000", '
                     f'"prompt_tokens": 120, "completion_tokens": {900 + i % 700}, "finish_reason": "stop", '
                     f'"dataset": "{ds}", "t": {1_764_000_000 + i}}}, "conversations": [{{"role": "user", '
                     f'"content": {p_json}}}, {{"role": "assistant", "content": {a_json}}}]}}\n')
    (out_dir / "big.job.json").write_text(json.dumps({
        "out": str(out), "servers": [], "inputs": [str(inp)], "mix": None, "root": str(root)}))
    return inp, out


def progress_line(t: float, k: int, n: int, rows: int, started: float) -> str:
    done = min(rows, int(rows * 0.9 * k / n))  # 90 % done at the end of the log: mid-run
    per = rows // len(DATASETS)
    snap = {
        "t": t, "state": "running", "started_at": started, "total": rows, "done": done, "failed": k // 500,
        "skipped": 17, "in_flight": 128, "remaining": max(0, rows - done - k // 500 - 17),
        "prompt_tokens": done * 120, "completion_tokens": done * 1200, "req_s": 0.46 + (k % 7) * 0.01,
        "tok_s": 830.2 + (k % 11), "window_s": 30,
        "datasets": {d: {"total": per, "done": done // len(DATASETS), "failed": 0, "skipped": 1} for d in DATASETS},
        "servers": {f"http://127.0.0.1:{30000 + s}": {"name": f"srv{s}", "state": "up", "in_flight": 64,
                                                      "done": done // 2, "failed": 0, "retries": 3,
                                                      "req_s": 0.23, "tok_s": 415.1, "last_error": None}
                    for s in range(2)},
        "completion_tokens_hist": {"edges": [0, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
                                   "counts": [done // 50, done // 20, done // 10, done // 5, done // 4, done // 5,
                                              done // 20, done // 100]},
        "errors": {"context_length": {"count": k // 500, "example": "prompt is 9000 tokens, limit 8192"}},
        "message": None,
    }
    return json.dumps(snap) + "\n"


def write_progress(path: Path, rows: int, hours: float, end: float) -> int:
    n = int(hours * 3600 / 2)
    started = end - hours * 3600
    with open(path, "w") as f:
        for k in range(n):
            f.write(progress_line(started + 2 * k, k, n, rows, started))
    return n


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=83_288)
    ap.add_argument("--answer-chars", type=int, default=3300)
    ap.add_argument("--hours", type=float, default=50.0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-regen-page-", dir=args.dir))
    try:
        (root / "specdeck.toml").write_text('[workspace]\nname = "bench"\n')
        t = time.perf_counter()
        inp, out = write_inputs_and_output(root, args.rows, args.answer_chars)
        prog = out.with_name("big.progress.jsonl")
        end = time.time()
        started = end - args.hours * 3600  # one run: every snapshot has the same started_at
        lines = write_progress(prog, args.rows, args.hours, end)
        print(f"wrote {args.rows:,} output rows ({out.stat().st_size / 1e6:,.0f} MB), a progress log of "
              f"{lines:,} snapshots ({prog.stat().st_size / 1e6:,.0f} MB), input {inp.stat().st_size / 1e6:,.0f} MB "
              f"in {time.perf_counter() - t:,.1f} s")

        from backend.regen import follow

        t = time.perf_counter()
        f = follow.ProgressFollower(out).poll()
        eta = f.eta()
        first = time.perf_counter() - t
        tracemalloc.start()  # a second follower, traced (tracing slows it: not timed)
        base = tracemalloc.get_traced_memory()[0]
        g = follow.ProgressFollower(out).poll()
        held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        del g
        print(f"progress follower, first open (sampled):  {ms(first)}; history {len(f.history):,} points; "
              f"holds {held / 1e6:,.2f} MB (tracemalloc)")
        refresh = []
        for k in range(20):
            with open(prog, "a") as fh:
                fh.write(progress_line(time.time(), lines + k, lines + 20, args.rows, started))
            t = time.perf_counter()
            f.poll()
            f.eta()
            refresh.append(time.perf_counter() - t)
        print(f"progress refresh (poll + ETA after one appended line), median of 20: {ms(statistics.median(refresh))}"
              f" (max {ms(max(refresh))}); ETA {eta.low_s and eta.low_s / 3600:,.1f}-"
              f"{eta.high_s and eta.high_s / 3600:,.1f} h")

        from backend.regen import samples

        t = time.perf_counter()
        last = samples.last_row(out)
        t_last = time.perf_counter() - t
        t = time.perf_counter()
        samples.row_before(out, last.start)
        t_prev = time.perf_counter() - t
        t = time.perf_counter()
        mid = samples.find_row(out, f"r{args.rows // 2}")
        t_find = time.perf_counter() - t
        t = time.perf_counter()
        orig = samples.find_original([{"dataset": None, "file": inp}], f"r{args.rows // 2}")
        t_orig = time.perf_counter() - t
        assert mid is not None and orig is not None
        print(f"sample viewer: newest row {ms(t_last)}, previous {ms(t_prev)}, find an id in the middle of the "
              f"output {ms(t_find)}, its original in the input {ms(t_orig)}")

        from backend.regen.follow_specforge import SpecForgeFollower

        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        sf = SpecForgeFollower(inp, out)
        polls, t_all = [], time.perf_counter()
        while True:
            t = time.perf_counter()
            sf.poll()
            polls.append(time.perf_counter() - t)
            if not sf.catching_up:
                break
        t_all = time.perf_counter() - t_all
        sf_held = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        t = time.perf_counter()
        sf.poll()
        caught = time.perf_counter() - t
        print(f"SpecForge mode on the same output (traced by tracemalloc, so slower than untraced): "
              f"{len(polls)} polls of at most {sf.budget / 2**20:.0f} MiB per file to read it all, median "
              f"{ms(statistics.median(polls))} each, {t_all:,.1f} s in all; then a poll with nothing new "
              f"{ms(caught)}; {sf.done:,} rows counted of {sf.total:,}; holds {sf_held / 1e6:,.1f} MB (ids)")
        del sf

        os.environ["SPECDECK_WORKSPACE"] = str(root)
        import streamlit.runtime.scriptrunner.script_runner as script_runner
        from streamlit.testing.v1 import AppTest

        from backend import runtime as runtime_mod

        script = []  # (wall, CPU) of each script run, measured in the thread that runs it
        real_exec = script_runner.exec_func_with_error_handling

        def timed_exec(*a, **k):
            t, c = time.perf_counter(), time.thread_time()
            try:
                return real_exec(*a, **k)
            finally:
                script.append((time.perf_counter() - t, time.thread_time() - c))

        script_runner.exec_func_with_error_handling = timed_exec
        follow._followers.clear()  # the page opens the log itself, cold
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
        at.run()  # the frame: starts the runtime
        at.switch_page("app_pages/regeneration.py")
        script.clear()
        t = time.perf_counter()
        at.run()
        cold = time.perf_counter() - t
        assert not at.exception, at.exception
        cold_script = script[-1]
        warm, runs = [], []
        for k in range(9):
            with open(prog, "a") as fh:  # a new snapshot before each run, as in a live job
                fh.write(progress_line(time.time(), lines + 20 + k, lines + 40, args.rows, started))
            t = time.perf_counter()
            at.run()
            warm.append(time.perf_counter() - t)
            runs.append(script[-1])
        med = lambda xs: statistics.median(xs)  # noqa: E731
        print(f"page server time (app.py + app_pages/regeneration.py, a new snapshot before each run), script thread: "
              f"first {ms(cold_script[0])} wall / {ms(cold_script[1])} CPU (imports, opens the log); then median of 9 "
              f"{ms(med([r[0] for r in runs]))} wall / {ms(med([r[1] for r in runs]))} CPU "
              f"(CPU min {ms(min(r[1] for r in runs))}, max {ms(max(r[1] for r in runs))})")
        print(f"  the whole AppTest run (with its polling): first {ms(cold)}, median {ms(med(warm))}; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        runtime_mod.close_all()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak resident memory of this process: {peak:,.0f} MB (the output is never read whole)")
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
