"""The simulator against SGLang 0.5.23's own benchmark client and tokenizer loading.

``python -m sglang.bench_serving`` runs in the serving environment (the ``serve_python``
fixture) with no --tokenizer: it reads the tokenizer path from /model_info and loads the
simulated target's tokenizer with transformers.AutoTokenizer, as it would a real model's.
Everything stays offline (HF_HUB_OFFLINE) and on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.sim.simproc import Sim, spec_args

HERE = Path(__file__).resolve().parent
NUM_PROMPTS, INPUT_LEN, OUTPUT_LEN = 20, 48, 24


def _offline_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp / "hf"),
               PYTHONWARNINGS="ignore", PYTHONDONTWRITEBYTECODE="1")
    return env


@pytest.fixture(scope="module")
def sim(launch, dirs) -> Sim:
    # Served under its model path, like a real launch. The server reports an accept length
    # once a decode-log interval has passed, so a short interval lets the first run see it.
    s = launch(spec_args(dirs, "EAGLE3") + ["--decode-log-interval", "5"])
    s.wait_ready()
    return s


BACKENDS = ("sglang", "sglang-oai", "sglang-oai-chat")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_serving_runs_every_backend(serve_python, sim, tmp_path):
    cmd = [str(serve_python), str(HERE / "bench_serving_main.py")]
    for i, backend in enumerate(BACKENDS):
        cmd += ([] if i == 0 else ["::"]) + [
            "--backend", backend, "--base-url", sim.base, "--dataset-name", "random-ids",
            "--num-prompts", str(NUM_PROMPTS), "--random-input-len", str(INPUT_LEN),
            "--random-output-len", str(OUTPUT_LEN), "--random-range-ratio", "1.0", "--seed", "1",
            "--output-file", str(tmp_path / f"{backend}.jsonl"), "--disable-tqdm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=_offline_env(tmp_path),
                          cwd=str(tmp_path))
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-4000:]
    assert report.count("=== bench_serving run finished") == len(BACKENDS), report[-4000:]
    assert report.count("Accept length:") == len(BACKENDS), report[-4000:]
    for backend in BACKENDS:
        rec = json.loads((tmp_path / f"{backend}.jsonl").read_text().splitlines()[-1])
        assert rec["backend"] == backend and rec["completed"] == NUM_PROMPTS
        # range ratio 1.0: every request asks for exactly OUTPUT_LEN tokens and ignores EOS
        assert rec["total_output_tokens"] == NUM_PROMPTS * OUTPUT_LEN, backend
        # the client's own tokenizer reads the streamed text back to the same count
        assert rec["total_output_tokens_retokenized"] == NUM_PROMPTS * OUTPUT_LEN, backend
        assert 1.0 <= rec["accept_length"] <= 4.0  # 3 steps: at most 3 drafts + 1 bonus


_COUNT = r"""
import json, sys, urllib.request
from transformers import AutoTokenizer
base = sys.argv[1]
info = json.load(urllib.request.urlopen(base + "/model_info"))
tok = AutoTokenizer.from_pretrained(info["tokenizer_path"])
messages = [{"role": "user", "content": "How many tokens does this question take?"}]
print(json.dumps({
    "chat": len(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]),
    "plain": len(tok.encode("Paris is the capital city of France")),
}))
"""


def test_prompt_tokens_agree_with_the_clients_tokenizer(serve_python, sim, tmp_path):
    proc = subprocess.run([str(serve_python), "-c", _COUNT, sim.base], capture_output=True, text=True,
                          timeout=180, env=_offline_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = json.loads(proc.stdout.strip().splitlines()[-1])
    st, raw = sim.request("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "How many tokens does this question take?"}], "max_tokens": 1})
    assert st == 200 and json.loads(raw)["usage"]["prompt_tokens"] == client["chat"]
    st, raw = sim.request("/v1/completions", {"prompt": "Paris is the capital city of France", "max_tokens": 1})
    assert st == 200 and json.loads(raw)["usage"]["prompt_tokens"] == client["plain"]
    assert client["plain"] == 8  # BOS + 7 words
