"""``OUT.job.json``: what ``regen run`` was given, read back whole by a resume with no arguments."""

from __future__ import annotations

import dataclasses
import json

from backend.regen.config import JobConfig, ServerSpec, read_job_json, write_job_json
from backend.regen.output import RunFiles


def test_every_parameter_survives_the_round_trip(tmp_path):
    files = RunFiles.of(tmp_path / "out" / "code.jsonl")
    cfg = JobConfig(out=files.out, servers=[ServerSpec("http://127.0.0.1:30001", "demo-llama"),
                                            ServerSpec("http://10.0.0.5:8000")],
                    inputs=[str(tmp_path / "a.jsonl"), str(tmp_path / "b.parquet")], root=str(tmp_path),
                    concurrency=12, max_tokens=321, temperature=0.3, top_p=0.85, reasoning="save",
                    system_prompt="You write Python.", model="glm-5", stream=True, first_byte_timeout=45.0, chunk_timeout=20.0,
                    startup_timeout=30.0, max_attempts=4)
    # every field differs from its default, so a field lost on the way cannot pass unseen
    defaults = JobConfig(out=files.out, servers=[])
    assert all(getattr(cfg, f.name) != getattr(defaults, f.name)
               for f in dataclasses.fields(JobConfig) if f.name not in ("out", "mix"))
    write_job_json(files, cfg)
    back = read_job_json(files)
    assert back == cfg
    assert isinstance(back.servers[0], ServerSpec) and back.out == files.out

    mixed = dataclasses.replace(cfg, inputs=[], mix={"name": "code", "entries": [
        {"name": "code", "dataset": "opc", "file": "data/opc.jsonl", "weight": 1.0}]})
    write_job_json(files, mixed)
    assert read_job_json(files) == mixed
    assert json.loads(files.job.read_text())["system_prompt"] == "You write Python."
