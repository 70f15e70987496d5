"""Model folders and configs for the SGLang backend tests (written to tmp dirs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from backend.sglang.config import ServerConfig
from backend.sim.models import make_draft_dir, make_target_dir

GiB = 1024 ** 3


def eight_gpus(free_gib: float = 75.0, total_gib: float = 80.0):
    return lambda: [(i, int(total_gib * GiB), int(free_gib * GiB)) for i in range(8)]


def port_free(host: str, port: int) -> bool:
    return True


@pytest.fixture
def llama(tmp_path: Path) -> dict[str, Path]:
    """Llama-3.1-8B target (hidden 4096, 32 layers) and its EAGLE-3 draft."""
    target = make_target_dir(tmp_path / "Llama-3.1-8B-Instruct", hidden_size=4096, num_hidden_layers=32,
                             vocab_size=128256)
    draft = make_draft_dir(tmp_path / "sglang-EAGLE3-LLaMA3.1-Instruct-8B", target_hidden_size=4096,
                           vocab_size=128256, draft_vocab_size=32000)
    return {"target": target, "draft": draft, "root": tmp_path}


@pytest.fixture
def kimi(tmp_path: Path) -> dict[str, Path]:
    """Kimi-K2-like target (DeepseekV3 architecture without MTP layers, hidden 7168, 61 layers)
    and an EAGLE-3 draft naming aux layers [2, 30, 58]."""
    target = make_target_dir(tmp_path / "Kimi-K2-Instruct", architecture="DeepseekV3ForCausalLM",
                             hidden_size=7168, num_hidden_layers=61, vocab_size=163840, model_type="kimi_k2")
    cfg = json.loads((target / "config.json").read_text())
    cfg["num_nextn_predict_layers"] = 0
    (target / "config.json").write_text(json.dumps(cfg, indent=2))
    draft = make_draft_dir(tmp_path / "kimi-k2-eagle3", target_hidden_size=7168, vocab_size=163840,
                           draft_vocab_size=32000, eagle_aux_hidden_state_layer_ids=[2, 30, 58])
    return {"target": target, "draft": draft, "root": tmp_path}


def server_cfg(target: Path, draft: Path | None, algorithm: str | None = "EAGLE3", **kw) -> ServerConfig:
    spec = {"algorithm": algorithm, "draft_model_path": str(draft) if draft else None,
            "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
    spec.update(kw.pop("speculative", {}))
    base = {"name": "srv", "model_path": str(target), "speculative": spec, "sglang_version": "0.5.10",
            "python": sys.executable}
    base.update(kw)
    return ServerConfig.model_validate(base)
