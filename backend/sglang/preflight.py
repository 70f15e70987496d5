"""Checks run before every launch and relaunch of an SGLang server.

Each :class:`Finding` says what was found and how to fix it.  Errors block the
launch unless the operator confirms "launch anyway" (audited by the caller);
warnings are shown; infos explain what SGLang will do on its own.

The checks are the ones that fail silently on a real server: the algorithm
against the draft's architecture (an EAGLE-3 draft under ``EAGLE`` runs with
accept_len 1.0 and no error), the draft's fc input width against the target's
hidden size, aux layer ids, vocab mapping, the steps/topk/draft-token rules,
paths, the port and the GPUs.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Callable

from backend.sglang.argcheck import argv_findings, check_argv, effective_config
from backend.sglang.config import ServerConfig
from backend.sglang.findings import ORDER, Finding, Severity, has_errors  # noqa: F401 (re-exported)
from backend.modelinfo import (
    DraftInfo, ModelInfoError, TargetInfo, default_aux_layers, read_draft, read_target,
)
from backend.sglang.version import Capabilities, capabilities, resolve_capabilities

GiB = 1024 ** 3

# (index, total_bytes, free_bytes) per GPU, or None when there is no NVIDIA driver.
GpuProbe = Callable[[], "list[tuple[int, int, int]] | None"]
PortProbe = Callable[[str, int], bool]  # True when host:port can be bound


# -- probes --------------------------------------------------------------------

def port_is_free(host: str, port: int) -> bool:
    """Try to bind ``host:port`` the way the server will.

    SGLang's HTTP server (uvicorn) binds with SO_REUSEADDR, so connections
    of a stopped server lingering in TIME_WAIT do not hold the port; only a
    socket still listening there does.
    """
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host.strip("[]"), port))
        return True
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        s.close()


def nvml_gpu_probe() -> list[tuple[int, int, int]] | None:
    """GPUs as NVML sees them, or None when there is no NVIDIA driver or library."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # library or driver missing
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            mem = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i))
            out.append((i, int(mem.total), int(mem.free)))
        return out
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


# -- helpers -------------------------------------------------------------------

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _check_dir(path: str, what: str, field: str, out: list[Finding]) -> bool:
    """True when ``path`` is a readable local folder with a config.json."""
    p = Path(path).expanduser()
    if not p.exists():
        if _HUB_ID.match(path) and not path.startswith((".", "~")):
            out.append(Finding("warning", f"{what}-not-local",
                               f"{what} '{path}' is not a local folder; SGLang will fetch it from the Hugging Face Hub, "
                               "so its config and weights are not checked here.",
                               "Download it first and point the path at the local folder to have it checked.", field))
            return False
        out.append(Finding("error", f"{what}-missing", f"{what} '{path}' does not exist.",
                           "Correct the path, or mount the volume that holds it.", field))
        return False
    if not p.is_dir():
        out.append(Finding("error", f"{what}-not-dir", f"{what} '{path}' is a file, not a model folder.",
                           "Point it at the folder holding config.json and the weights.", field))
        return False
    if not os.access(p, os.R_OK | os.X_OK):
        out.append(Finding("error", f"{what}-unreadable", f"{what} '{path}' is not readable by this user.",
                           "Fix the folder's permissions for the user that runs the server.", field))
        return False
    if not (p / "config.json").is_file():
        out.append(Finding("error", f"{what}-no-config", f"{what} '{path}' has no config.json.",
                           "Point it at the model folder itself (the one with config.json).", field))
        return False
    return True


def _layers_text(ids) -> str:
    return "[" + ", ".join(str(i) for i in ids) + "]"


# -- the checks -----------------------------------------------------------------

def run_preflight(cfg: ServerConfig, *, gpu_probe: GpuProbe | None = None,
                  port_probe: PortProbe | None = None,
                  version: Capabilities | str | None = None) -> list[Finding]:
    """All findings for ``cfg``, errors first.

    ``gpu_probe`` defaults to NVML, ``port_probe`` to a bind test; ``version``
    defaults to the config's override or the version detected from its python.
    """
    if isinstance(version, Capabilities):
        caps = version
    elif version:
        caps = capabilities(version)
    else:
        caps = resolve_capabilities(cfg)
    out: list[Finding] = []

    if caps.assumed:
        out.append(Finding("info" if cfg.simulate else "warning", "version-unknown",
                           f"The sglang version of '{cfg.python}' was not detected; flags and log formats of "
                           f"{caps.version} (the newest known) are assumed.",
                           "Set sglang_version in the server config, or point python at the serving environment.",
                           "sglang_version"))

    if not cfg.simulate and shutil.which(cfg.python) is None:
        out.append(Finding("error", "python-missing", f"The serving interpreter '{cfg.python}' was not found.",
                           "Set python to the interpreter of the environment where sglang is installed.", "python"))

    target: TargetInfo | None = None
    if _check_dir(cfg.model_path, "model_path", "model_path", out):
        try:
            target = read_target(cfg.model_path)
        except ModelInfoError as exc:
            out.append(Finding("error", "target-config", str(exc), "Fix the target's config.json.", "model_path"))

    _check_speculative(cfg, caps, target, out)
    argv = check_argv(cfg, caps)
    out.extend(argv_findings(argv, cfg))
    effective = effective_config(cfg, argv)
    if effective is not None:
        # what the server would really run: the speculative checks again, on the overridden fields
        seen = {f.code for f in out}
        extra: list[Finding] = []
        _check_speculative(effective, caps, target, extra)
        by = "; ".join(dict.fromkeys(b for o in argv.overrides if o.dest.startswith("speculative_")
                                     for b in o.by))
        out.extend(Finding(f.severity, f.code, f"With extra_args applied ({by}): {f.found}", f.fix, "extra_args")
                   for f in extra if f.code not in seen)
    _check_flags(cfg, caps, out, reported={f for o in argv.overrides for f in o.flags})
    _check_port(cfg, port_probe or port_is_free, out)
    _check_gpus(cfg, gpu_probe or nvml_gpu_probe, target, out)

    out.sort(key=lambda f: ORDER[f.severity])
    return out


def _check_speculative(cfg: ServerConfig, caps: Capabilities, target: TargetInfo | None,
                       out: list[Finding]) -> None:
    spec = cfg.speculative
    alg = spec.algorithm
    if alg is None:
        if spec.draft_model_path:
            out.append(Finding("warning", "draft-without-algorithm",
                               "A draft path is set but speculative.algorithm is not, so speculation is off "
                               "and the draft is not loaded.",
                               "Set speculative.algorithm (EAGLE3 for an EAGLE-3 draft), or remove the draft path.",
                               "speculative.algorithm"))
        return

    if alg not in caps.algorithms:
        out.append(Finding("error", "algorithm-unsupported",
                           f"--speculative-algorithm {alg} is not accepted by sglang {caps.version} "
                           f"(choices: {', '.join(caps.algorithms)}).",
                           "Upgrade sglang in the serving environment or pick a supported algorithm.",
                           "speculative.algorithm"))

    if alg == "NGRAM":
        if spec.draft_model_path:
            out.append(Finding("warning", "ngram-draft-ignored", "NGRAM speculation uses no draft model; "
                               "the draft path is ignored.", "Remove speculative.draft_model_path.",
                               "speculative.draft_model_path"))
        return

    mtp_target = target is not None and target.is_mtp
    draft: DraftInfo | None = None
    if spec.draft_model_path:
        same = Path(spec.draft_model_path).expanduser().resolve() == Path(cfg.model_path).expanduser().resolve()
        if same and mtp_target:
            pass  # the target's own MTP layers, as SGLang sets it for NEXTN
        elif _check_dir(spec.draft_model_path, "draft_model_path", "speculative.draft_model_path", out):
            try:
                draft = read_draft(spec.draft_model_path)
            except ModelInfoError as exc:
                out.append(Finding("error", "draft-config", str(exc), "Fix the draft's config.json.",
                                   "speculative.draft_model_path"))
            if draft is not None and mtp_target and draft.kind not in ("eagle", "eagle3"):
                out.append(Finding("warning", "mtp-draft-path",
                                   f"The target ({target.arch}) has MTP layers; SGLang can draft with them and logs "
                                   "'does not require setting speculative_draft_model_path'.",
                                   "Remove speculative.draft_model_path to use the target's MTP layers.",
                                   "speculative.draft_model_path"))
    else:
        if alg == "NEXTN" and target is not None and not mtp_target:
            out.append(Finding("error", "nextn-needs-mtp",
                               f"NEXTN uses the target's own MTP layers, but the target architecture "
                               f"{target.arch or '(none)'} has none.",
                               "Use a target with MTP layers, or pick EAGLE/EAGLE3 with a draft path.",
                               "speculative.algorithm"))
        elif alg in ("EAGLE3", "STANDALONE") or (alg == "EAGLE" and not mtp_target and target is not None):
            out.append(Finding("error", "draft-path-missing",
                               f"--speculative-algorithm {alg} needs a draft model, and none is set.",
                               "Set speculative.draft_model_path to the draft's folder.",
                               "speculative.draft_model_path"))

    if draft is not None:
        _check_draft(cfg, caps, target, draft, out)
    _check_steps(cfg, caps, target, out)


def _n_aux(caps: Capabilities, draft: DraftInfo) -> int:
    if caps.at_least("0.5.23"):
        if draft.num_aux_hidden_states:
            return draft.num_aux_hidden_states
        if draft.eagle_layer_ids:
            return len(draft.eagle_layer_ids)
    return 3


def _check_draft(cfg: ServerConfig, caps: Capabilities, target: TargetInfo | None,
                 draft: DraftInfo, out: list[Finding]) -> None:
    alg = cfg.speculative.algorithm
    kind = draft.kind
    arch = draft.arch or "(no architectures)"
    L = target.num_hidden_layers if target else None
    ids = draft.eagle_layer_ids
    if ids is None and L is not None:
        used_ids = tuple(i - 1 for i in default_aux_layers(L))  # as output-layer ids
    else:
        used_ids = ids

    if kind == "eagle3" and alg in ("EAGLE", "NEXTN"):
        n = _n_aux(caps, draft)
        if target is not None:
            h = target.hidden_size
            widths = (f"the target's final hidden state, {h} wide, instead of the {n * h}-wide concatenation "
                      f"of {n} layers{' ' + _layers_text(used_ids) if used_ids else ''} ({n} × {h})")
        else:
            widths = f"the target's final hidden state instead of the concatenation of {n} aux layers"
        fc = f" (its fc.weight expects {draft.fc_in_features} inputs)" if draft.fc_in_features else ""
        out.append(Finding(
            "error", "eagle3-draft-with-eagle",
            f"--speculative-algorithm {alg} with an EAGLE-3 draft ({arch}). SGLang captures aux hidden states "
            f"only when the algorithm is exactly EAGLE3 (is_eagle3), so with EAGLE the draft receives {widths}; "
            f"its fc layer{fc} is skipped, the draft guesses from the wrong input, and accept_len will sit at 1.0 "
            "with no error in the log.",
            "Launch with --speculative-algorithm EAGLE3 (set speculative.algorithm = \"EAGLE3\").",
            "speculative.algorithm"))
    elif kind == "eagle3" and alg == "STANDALONE":
        out.append(Finding("error", "eagle3-draft-with-standalone",
                           f"--speculative-algorithm STANDALONE with an EAGLE-3 draft ({arch}); STANDALONE expects "
                           "a complete small causal LM.",
                           "Launch with --speculative-algorithm EAGLE3.", "speculative.algorithm"))
    elif kind == "eagle" and alg == "EAGLE3":
        h = target.hidden_size if target else None
        detail = (f" the target will send {3 * h}-wide concatenated states to a draft whose fc expects "
                  f"{draft.fc_in_features or 'a different width'};" if h else "")
        out.append(Finding("error", "eagle-draft-with-eagle3",
                           f"--speculative-algorithm EAGLE3 with an EAGLE-1/2 draft ({arch}):{detail} the draft "
                           "cannot work this way.",
                           "Launch with --speculative-algorithm EAGLE for this draft.", "speculative.algorithm"))
    elif kind == "model" and alg in ("EAGLE", "EAGLE3"):
        out.append(Finding("error", "plain-draft-with-eagle",
                           f"The draft ({arch}) is a plain causal LM, not an EAGLE draft, but the algorithm is {alg}.",
                           "Use --speculative-algorithm STANDALONE for a small LM draft, or point at an EAGLE draft.",
                           "speculative.algorithm"))

    if kind != "eagle3":
        return

    # --- EAGLE-3 geometry: what the target sends vs what the draft's fc takes ---
    n = _n_aux(caps, draft)
    fc_in = draft.fc_in_features
    if draft.weights_error:
        out.append(Finding("warning", "draft-weights-unread", f"Draft weights not checked: {draft.weights_error}",
                           "Save the draft as safetensors so its fc width, d2t and t2d can be checked.",
                           "speculative.draft_model_path"))
    elif fc_in is None:
        out.append(Finding("error", "fc-missing",
                           f"The draft's weights ({', '.join(draft.weight_files)}) have no fc.weight tensor; an "
                           "EAGLE-3 draft fuses the aux hidden states through fc.",
                           "Point at the draft checkpoint SpecForge saved (with fc.weight).",
                           "speculative.draft_model_path"))
    if target is not None and fc_in is not None:
        expected = n * target.hidden_size
        if fc_in != expected:
            guess = ""
            if fc_in % n == 0:
                guess = f" (it fits a target with hidden size {fc_in // n})"
            out.append(Finding("error", "fc-width",
                               f"The draft's fc.weight takes {fc_in} inputs but the target sends {n} aux layers × "
                               f"hidden size {target.hidden_size} = {expected}{guess}: the draft was trained for "
                               "another target.",
                               "Use a draft trained for this target model (or the target it was trained for).",
                               "speculative.draft_model_path"))
    if fc_in is not None:
        cfg_in = (draft.target_hidden_size or draft.hidden_size or 0) * n
        if cfg_in and cfg_in != fc_in:
            out.append(Finding("error", "fc-config-mismatch",
                               f"The draft's config.json implies an fc input of {n} × "
                               f"{draft.target_hidden_size or draft.hidden_size} = {cfg_in} "
                               f"({'target_hidden_size' if draft.target_hidden_size else 'hidden_size'}), but fc.weight "
                               f"in the weights takes {fc_in}; SGLang builds fc from the config and the weights will "
                               "not load.",
                               "Set target_hidden_size in the draft's config.json to the target's hidden size.",
                               "speculative.draft_model_path"))
        fc_out = draft.fc_weight.shape[0] if draft.fc_weight else None
        if draft.hidden_size and fc_out and fc_out != draft.hidden_size:
            out.append(Finding("error", "fc-out-width",
                               f"fc.weight produces {fc_out} outputs but the draft's hidden_size is {draft.hidden_size}.",
                               "The config.json does not belong to these weights; use the pair SpecForge saved.",
                               "speculative.draft_model_path"))

    # layers
    if draft.num_hidden_layers is not None and draft.num_hidden_layers != 1 and caps.eagle3_single_layer_only:
        out.append(Finding("error", "draft-layers",
                           f"The draft has num_hidden_layers = {draft.num_hidden_layers}; sglang {caps.version} "
                           "supports EAGLE-3 drafts with exactly 1 layer ('EAGLE3 currently only supports 1 layer').",
                           "Use a 1-layer draft, or sglang 0.5.23 or later.", "speculative.draft_model_path"))
    wl = draft.weight_layer_count
    if wl is not None and draft.num_hidden_layers is not None and wl != draft.num_hidden_layers:
        out.append(Finding("warning", "draft-layer-count",
                           f"The draft's config.json says {draft.num_hidden_layers} layer(s) but its weights hold {wl}.",
                           "Check that config.json and the weights come from the same checkpoint.",
                           "speculative.draft_model_path"))

    # vocab
    tv = target.vocab_size if target else None
    if tv is not None and draft.vocab_size is not None and draft.vocab_size != tv:
        out.append(Finding("error", "vocab-size",
                           f"The draft's vocab_size is {draft.vocab_size} but the target's is {tv}.",
                           "Use a draft trained with this target's tokenizer.", "speculative.draft_model_path"))
    full_vocab = tv or draft.vocab_size
    dv = draft.draft_vocab_size
    if dv is None:
        out.append(Finding("info", "draft-vocab-unset",
                           "The draft sets no draft_vocab_size; SGLang uses the full vocabulary and, unless the "
                           "embeddings are tied, loads the lm_head from the target.",
                           "Nothing to do if that is intended.", None))
    elif full_vocab is not None and dv > full_vocab:
        out.append(Finding("error", "draft-vocab-size",
                           f"draft_vocab_size {dv} is larger than the vocabulary ({full_vocab}).",
                           "Fix draft_vocab_size in the draft's config.json.", "speculative.draft_model_path"))
    lm = draft.lm_head
    if dv is not None and lm is not None and lm.shape and lm.shape[0] != dv:
        out.append(Finding("error", "lm-head-rows",
                           f"lm_head.weight has {lm.shape[0]} rows but draft_vocab_size is {dv}.",
                           "Use the config.json saved with these weights.", "speculative.draft_model_path"))
    if draft.tensors:
        reduced = dv is not None and full_vocab is not None and dv < full_vocab
        if draft.d2t is None:
            if reduced:
                out.append(Finding("error", "d2t-missing",
                                   f"The draft predicts over a reduced vocabulary of {dv} tokens (of {full_vocab}) "
                                   "but its weights have no d2t tensor, so draft token ids cannot be mapped to "
                                   "target ids: nearly every draft token will be rejected (accept_len near 1.0).",
                                   "Save the draft with its vocab mapping (SpecForge writes d2t and t2d next to the "
                                   "weights).", "speculative.draft_model_path"))
        elif dv is not None and draft.d2t.shape != (dv,):
            out.append(Finding("error", "d2t-shape",
                               f"d2t has shape {list(draft.d2t.shape)}, expected [{dv}] (draft_vocab_size).",
                               "Use the vocab mapping made for this draft.", "speculative.draft_model_path"))
        if draft.t2d is None:
            if reduced:
                out.append(Finding("info", "t2d-missing",
                                   "The draft has no t2d tensor; SGLang does not need it (it maps with d2t), "
                                   "but SpecForge saves it, so the checkpoint may be incomplete.",
                                   "Nothing to do unless other tools need t2d.", None))
        elif full_vocab is not None and draft.t2d.shape != (full_vocab,):
            out.append(Finding("warning", "t2d-shape",
                               f"t2d has shape {list(draft.t2d.shape)}, expected [{full_vocab}] (the target vocab).",
                               "Use the vocab mapping made for this draft.", "speculative.draft_model_path"))

    # aux layers
    if target is not None:
        L = target.num_hidden_layers
        if ids:
            bad = [i for i in ids if i < 0 or i + 1 > L - 1]
            if bad:
                out.append(Finding("error", "aux-layer-range",
                                   f"eagle_aux_hidden_state_layer_ids {_layers_text(ids)} include {_layers_text(bad)}, "
                                   f"outside 0..{L - 2} for a target with {L} layers (SGLang captures the output of "
                                   "layer i as it enters layer i+1); those states are never captured.",
                                   "Use the layer ids the draft was trained with, for this target.",
                                   "speculative.draft_model_path"))
            if len(set(ids)) != len(ids):
                out.append(Finding("warning", "aux-layer-duplicate",
                                   f"eagle_aux_hidden_state_layer_ids {_layers_text(ids)} repeat a layer.",
                                   "Check the draft's eagle_config.", "speculative.draft_model_path"))
            if not caps.eagle3_layers_from_draft_config:
                dflt = default_aux_layers(L)
                out.append(Finding("warning", "aux-layers-ignored",
                                   f"sglang {caps.version} ignores the draft's eagle_config and captures the hidden "
                                   f"states entering layers {_layers_text(dflt)}; the draft names "
                                   f"{_layers_text(ids)} (entering {_layers_text([i + 1 for i in ids])}).",
                                   "Upgrade sglang, or use a draft trained on the default layers.",
                                   "speculative.draft_model_path"))
            else:
                out.append(Finding("info", "aux-layers",
                                   f"The draft names aux layers {_layers_text(ids)}; SGLang captures them as the "
                                   f"hidden states entering layers {_layers_text([i + 1 for i in ids])} of {L}.",
                                   "Nothing to do.", None))
        else:
            dflt = default_aux_layers(L)
            out.append(Finding("info", "aux-layers-default",
                               f"The draft names no eagle_aux_hidden_state_layer_ids, so SGLang captures the hidden "
                               f"states entering layers {_layers_text(dflt)} (the outputs of layers "
                               f"{_layers_text([i - 1 for i in dflt])}, SpecForge's training default for {L} layers).",
                               "If the draft was trained on other layers, add them to eagle_config in its config.json.",
                               None))


def _check_steps(cfg: ServerConfig, caps: Capabilities, target: TargetInfo | None, out: list[Finding]) -> None:
    spec = cfg.speculative
    if spec.algorithm not in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        return
    steps, topk, dtok = spec.num_steps, spec.eagle_topk, spec.num_draft_tokens
    if steps is None:
        if topk is not None or dtok is not None:
            out.append(Finding("error", "spec-params-partial",
                               "eagle_topk / num_draft_tokens are set but num_steps is not; SGLang chooses all three "
                               "only when num_steps is unset, and then refuses the other two (assertion at startup).",
                               "Set num_steps too, or leave all three unset.", "speculative.num_steps"))
        else:
            s, k, d = caps.auto_spec_params(target.arch if target else None)
            out.append(Finding("info", "spec-params-auto",
                               f"num_steps, eagle_topk and num_draft_tokens are unset; sglang {caps.version} will "
                               f"choose steps={s}, topk={k}, draft tokens={d}"
                               f"{' for ' + target.arch if target else ''}.",
                               "Set them explicitly to pin the behaviour across versions.", "speculative.num_steps"))
        return
    if topk == 1 and dtok is not None and dtok != steps + 1:
        out.append(Finding("warning", "draft-tokens-adjusted",
                           f"eagle_topk is 1, so SGLang forces num_draft_tokens to num_steps + 1 = {steps + 1} "
                           f"(configured {dtok}).",
                           f"Set num_draft_tokens = {steps + 1}.", "speculative.num_draft_tokens"))
    if topk is not None and topk > 1 and dtok is not None and dtok <= steps:
        out.append(Finding("warning", "draft-tokens-few",
                           f"num_draft_tokens {dtok} is not above num_steps {steps}; the extra draft steps are "
                           "always discarded.",
                           f"Raise num_draft_tokens above {steps} or lower num_steps.", "speculative.num_draft_tokens"))
    if topk is not None and topk > 1:
        if cfg.attention_backend == "trtllm_mha":
            out.append(Finding("error", "topk-trtllm",
                               "The trtllm_mha attention backend supports only eagle_topk = 1.",
                               "Set eagle_topk = 1 or use another attention backend.", "speculative.eagle_topk"))
        if cfg.page_size is not None and cfg.page_size > 1:
            allowed = caps.topk_with_paged_backends()
            if allowed is None:
                out.append(Finding("warning", "topk-paged-forced",
                                   f"eagle_topk {topk} with page_size {cfg.page_size}: sglang {caps.version} forces "
                                   "topk to 1.",
                                   "Set eagle_topk = 1, or page_size = 1.", "speculative.eagle_topk"))
            elif cfg.attention_backend is None:
                out.append(Finding("warning", "topk-paged-backend",
                                   f"eagle_topk {topk} with page_size {cfg.page_size} works only with the "
                                   f"{', '.join(allowed)} attention backend(s) in sglang {caps.version}; none is set.",
                                   f"Set attention_backend to one of {', '.join(allowed)}, or use eagle_topk = 1.",
                                   "attention_backend"))
            elif cfg.attention_backend not in allowed:
                out.append(Finding("error", "topk-paged-backend",
                                   f"eagle_topk {topk} with page_size {cfg.page_size} is refused with the "
                                   f"{cfg.attention_backend} backend in sglang {caps.version} (allowed: "
                                   f"{', '.join(allowed)}).",
                                   f"Use eagle_topk = 1, page_size = 1, or attention_backend in {', '.join(allowed)}.",
                                   "speculative.eagle_topk"))


_GENERATED_FLAGS = (
    "--model-path", "--host", "--port", "--tp-size", "--mem-fraction-static", "--served-model-name",
    "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
    "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--enable-metrics", "--decode-log-interval",
    "--page-size", "--attention-backend",
)


def _check_flags(cfg: ServerConfig, caps: Capabilities, out: list[Finding], *,
                 reported: set[str] = frozenset()) -> None:
    """``reported``: extra flags the launch-command check already names as overrides."""
    flags = [a.split("=", 1)[0] for a in cfg.extra_args if a.startswith("--") and a not in reported]
    dup = sorted(set(f for f in flags if f in _GENERATED_FLAGS))
    if dup:
        out.append(Finding("warning", "flag-duplicate",
                           f"extra_args repeats {', '.join(dup)}, which the config already sets; the later value wins "
                           "and the dashboard may show the other.",
                           "Set these through the config fields, not extra_args.", "extra_args"))
    if cfg.cuda_graph.disable and caps.disable_cuda_graph_deprecated:
        out.append(Finding("info", "disable-cuda-graph-deprecated",
                           f"--disable-cuda-graph is deprecated in sglang {caps.version} but still accepted.",
                           "Nothing to do now.", "cuda_graph.disable"))
    if not cfg.enable_metrics:
        out.append(Finding("warning", "metrics-off",
                           "enable_metrics is off, so /metrics is not served; charts use log lines only.",
                           "Set enable_metrics = true.", "enable_metrics"))
    if cfg.host in ("0.0.0.0", "::"):
        out.append(Finding("warning", "listen-all",
                           f"The server listens on all interfaces ({cfg.host}); anyone who can reach this machine "
                           "can use it.", "Use host = 127.0.0.1 unless other machines need it.", "host"))


def _check_port(cfg: ServerConfig, probe: PortProbe, out: list[Finding]) -> None:
    try:
        free = probe(cfg.host, cfg.port)
    except OSError as exc:
        out.append(Finding("error", "host-invalid", f"Cannot bind {cfg.host}:{cfg.port}: {exc.strerror or exc}.",
                           "Use a host address of this machine (127.0.0.1 or 0.0.0.0).", "host"))
        return
    if not free:
        out.append(Finding("error", "port-busy", f"Port {cfg.port} on {cfg.host} is already in use.",
                           "Stop what holds it (perhaps an earlier server) or choose another port.", "port"))


def _check_gpus(cfg: ServerConfig, probe: GpuProbe, target: TargetInfo | None, out: list[Finding]) -> None:
    try:
        gpus = probe()
    except Exception as exc:  # a probe failure must not stop the other checks
        gpus = None
        out.append(Finding("warning", "gpu-probe-failed", f"Reading the GPUs failed: {exc}.",
                           "Check the NVIDIA driver (nvidia-smi).", None))
        return
    if gpus is None:
        out.append(Finding("info" if cfg.simulate else "warning", "no-gpu-driver",
                           "No NVIDIA driver found: GPUs and their memory were not checked"
                           + (" (the simulator needs none)." if cfg.simulate else "."),
                           "Run on the GPU machine, or check the driver with nvidia-smi.", "gpus"))
        return
    have = {i: (total, free) for i, total, free in gpus}
    wanted = list(cfg.gpus) if cfg.gpus is not None else list(range(cfg.tp_size))
    missing = [g for g in wanted if g not in have]
    if missing:
        out.append(Finding("error", "gpu-missing",
                           f"GPU(s) {_layers_text(missing)} do not exist; this machine has "
                           f"{len(have)} GPU(s) ({_layers_text(sorted(have))}).",
                           "Fix gpus (CUDA_VISIBLE_DEVICES) or tp_size.", "gpus"))
    frac = cfg.mem_fraction_static
    present = [g for g in wanted if g in have]
    for g in present:
        total, free = have[g]
        if frac is not None:
            need = frac * total
            if free < need:
                out.append(Finding("error", "gpu-memory",
                                   f"GPU {g} has {free / GiB:.1f} GiB free of {total / GiB:.1f} GiB, but "
                                   f"mem_fraction_static {frac} reserves {need / GiB:.1f} GiB; something else holds "
                                   f"{(total - free) / GiB:.1f} GiB.",
                                   "Stop the other process on that GPU, or lower mem_fraction_static.",
                                   "mem_fraction_static"))
        elif free < 0.5 * total:
            out.append(Finding("warning", "gpu-busy",
                               f"GPU {g} has only {free / GiB:.1f} GiB free of {total / GiB:.1f} GiB.",
                               "Check what else runs on it (the GPUs page).", "gpus"))
    if target is not None and target.weight_bytes and present:
        per_gpu = target.weight_bytes / max(1, cfg.tp_size)
        smallest = min(have[g][0] for g in present)
        budget = (frac if frac is not None else 0.9) * smallest
        if per_gpu > budget:
            out.append(Finding("error", "weights-too-big",
                               f"The target's weights are {target.weight_bytes / GiB:.1f} GiB, "
                               f"{per_gpu / GiB:.1f} GiB per GPU at tp_size {cfg.tp_size}, more than the "
                               f"{budget / GiB:.1f} GiB the static pool gets on each GPU.",
                               "Raise tp_size (more GPUs) or use a quantised checkpoint.", "tp_size"))
