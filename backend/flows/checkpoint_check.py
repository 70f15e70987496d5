"""Can a training checkpoint be served?  SGLang's own draft checks (:mod:`backend.sglang.preflight`, the
Servers page's) run for the checkpoint (:mod:`backend.train.checkpoints`) as the EAGLE3 draft of a
chosen target."""

from __future__ import annotations

from pathlib import Path

from backend.modelinfo import ModelInfoError, read_target
from backend.sglang import preflight
from backend.sglang.config import ServerConfig, SpeculativeConfig
from backend.sglang.preflight import Finding
from backend.sglang.version import Capabilities, capabilities
from backend.train.checkpoints import inspect_checkpoint

_SEVERITY_ORDER = ("error", "warning", "info")


def preflight_checkpoint(checkpoint: str | Path, target: str | Path, *, server: ServerConfig | None = None,
                         sglang_version: str | Capabilities | None = None, num_steps: int | None = 3,
                         eagle_topk: int | None = 1, num_draft_tokens: int | None = 4,
                         draft_config: str | Path | None = None) -> list[Finding]:
    """The Servers page's draft checks for ``checkpoint`` served as the EAGLE3 draft of ``target``:
    architecture against the algorithm, fc width = aux layers × target hidden size, vocab size and the
    d2t/t2d mapping, layer count, aux layer ids, steps/topk/draft tokens.  Errors first.

    ``server``: the serving server's config, whose settings (and sglang version) are kept; only the
    algorithm and draft path change.  A torn or incomplete checkpoint (a file shorter than its header
    declares, a training state that does not unpickle) gets one error naming each damaged file; a runtime
    checkpoint gets one error with the export command."""
    ckpt = Path(checkpoint)
    if not ckpt.is_dir():
        return [Finding("error", "checkpoint-missing", f"The checkpoint folder {ckpt} does not exist.",
                        "Pick a checkpoint from the run's list.", "speculative.draft_model_path")]
    info = inspect_checkpoint(ckpt, draft_config=draft_config)
    if info.torn:
        return [Finding("error", "checkpoint-torn",
                        f"{ckpt.name} is torn or incomplete: " + "; ".join(info.damage),
                        "Pick an earlier checkpoint of the run (the list marks the whole ones); a file cut short "
                        "by a crash or a full disk cannot be served or resumed from.", "speculative.draft_model_path")]
    if info.runtime:
        cmd = " ".join(info.export_argv) if info.export_argv else (
            f"specforge export --to sglang --checkpoint {ckpt} --draft-config <the run's draft config> "
            f"--output-dir {ckpt.parent / (ckpt.name + '-sglang')}")
        return [Finding("error", "checkpoint-not-servable", f"{ckpt.name} is {info.why_not_servable}.",
                        f"Run: {cmd}", "speculative.draft_model_path")]
    spec = dict(algorithm="EAGLE3", draft_model_path=str(ckpt), num_steps=num_steps, eagle_topk=eagle_topk,
                num_draft_tokens=num_draft_tokens)
    if server is not None:
        cfg = server.model_copy(update={"model_path": str(target),
                                        "speculative": server.speculative.model_copy(update=spec)})
    else:
        cfg = ServerConfig(name="checkpoint-preflight", model_path=str(target), simulate=True,
                           speculative=SpeculativeConfig(**spec))
    if isinstance(sglang_version, Capabilities):
        caps = sglang_version
    else:
        caps = capabilities(sglang_version or cfg.sglang_version)
    out: list[Finding] = []
    tgt = None
    if preflight._check_dir(str(target), "model_path", "model_path", out):
        try:
            tgt = read_target(target)
        except ModelInfoError as exc:
            out.append(Finding("error", "target-config", str(exc), "Fix the target's config.json.", "model_path"))
    preflight._check_speculative(cfg, caps, tgt, out)
    out.sort(key=lambda f: _SEVERITY_ORDER.index(f.severity))
    return out
