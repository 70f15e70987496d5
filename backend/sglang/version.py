"""Which SGLang version a server runs, and what that version means for us.

The version is read from the serving environment's interpreter (never imported
into the dashboard's own process).  :class:`Capabilities` turns a version into
the facts the launch builder, client, parser and preflight need: flag names,
endpoint paths, what ``accept rate`` means, and how ``/health`` behaves.
"""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass
from typing import Literal

from backend.pyprobe import end_probe_group, parse_version

# When the version cannot be detected we assume the newest release we know.
NEWEST_KNOWN = "0.5.23"

_VERSION_CMD = "import importlib.metadata as m; print(m.version('sglang'))"
_cache: dict[str, str | None] = {}
_cache_lock = threading.Lock()


def detect_version(python: str, *, timeout_s: float = 15.0, use_cache: bool = True) -> str | None:
    """The sglang version installed for interpreter ``python``, or None.

    Runs ``[python, "-c", ...]`` (no shell) with a timeout; the answer is cached
    per interpreter path for the life of the process.  A missing interpreter, a
    missing package or a timeout all give None.
    """
    if use_cache:
        with _cache_lock:
            if python in _cache:
                return _cache[python]
    version: str | None = None
    try:
        # own session, so a timeout ends the interpreter and anything it started
        proc = subprocess.Popen([python, "-c", _VERSION_CMD], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    except OSError:
        proc = None
    if proc is not None:
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            lines = out.strip().splitlines()
            if proc.returncode == 0 and lines:
                parse_version(lines[-1])
                version = lines[-1].strip()
        except subprocess.TimeoutExpired:
            end_probe_group(proc)
        except ValueError:
            version = None
    with _cache_lock:
        _cache[python] = version
    return version


def clear_cache() -> None:
    with _cache_lock:
        _cache.clear()


AcceptRateMeaning = Literal["none", "with_bonus", "strict"]


@dataclass(frozen=True)
class Capabilities:
    """What one SGLang version does, as far as Specdeck cares.

    ``assumed`` is true when the version was not known and ``NEWEST_KNOWN`` was used.
    """

    version: str
    assumed: bool = False

    @property
    def v(self) -> tuple[int, ...]:
        return parse_version(self.version)

    def at_least(self, text: str) -> bool:
        return _cmp(self.v, parse_version(text)) >= 0

    # -- flags ---------------------------------------------------------
    @property
    def cuda_graph_max_bs_flag(self) -> str:
        """``--cuda-graph-max-bs-decode`` exists from 0.5.14; before it the flag is ``--cuda-graph-max-bs``."""
        return "--cuda-graph-max-bs-decode" if self.at_least("0.5.14") else "--cuda-graph-max-bs"

    @property
    def cuda_graph_max_bs_dest(self) -> str:
        """The ServerArgs field the max-batch-size flag sets."""
        return "cuda_graph_max_bs_decode" if self.at_least("0.5.14") else "cuda_graph_max_bs"

    @property
    def legacy_cuda_graph_max_bs_deprecated(self) -> bool:
        """0.5.14-0.5.19 still take ``--cuda-graph-max-bs`` as a deprecated alias of ``-decode``."""
        return self.at_least("0.5.14") and not self.at_least("0.5.20")

    @property
    def legacy_cuda_graph_max_bs_rejected(self) -> bool:
        """From 0.5.20 ``--cuda-graph-max-bs`` is an ambiguous prefix of ``-decode`` and ``-prefill``."""
        return self.at_least("0.5.20")

    @property
    def disable_cuda_graph_deprecated(self) -> bool:
        """``--disable-cuda-graph`` is still accepted but deprecated from 0.5.14."""
        return self.at_least("0.5.14")

    @property
    def algorithms(self) -> tuple[str, ...]:
        if self.at_least("0.5.3"):
            return ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
        return ("EAGLE", "EAGLE3", "NEXTN")

    # -- endpoints -----------------------------------------------------
    @property
    def server_info_path(self) -> str:
        return "/server_info" if self.at_least("0.5.10") else "/get_server_info"

    @property
    def model_info_path(self) -> str:
        return "/model_info" if self.at_least("0.5.10") else "/get_model_info"

    @property
    def health_generates(self) -> bool:
        """True when /health runs a one-token generation (0.4.10+), false when it only
        says the HTTP server is up (0.4.6)."""
        return self.at_least("0.4.10")

    @property
    def health_503_while_starting(self) -> bool:
        return self.at_least("0.5.3")

    @property
    def has_ready_endpoint(self) -> bool:
        return self.at_least("0.5.23")

    @property
    def health_meaning(self) -> str:
        if not self.health_generates:
            return "200 means only that the HTTP server is up (no generation check in this version)"
        if self.health_503_while_starting:
            return "200 after a one-token generation; 503 while starting or when the scheduler does not answer in 20 s"
        return "200 after a one-token generation; 503 when the scheduler does not answer in 20 s"

    # -- log and metric meaning ----------------------------------------
    @property
    def accept_rate_meaning(self) -> AcceptRateMeaning:
        """``none``: the decode line has no accept rate (before 0.5.4);
        ``with_bonus``: accept_len / num_draft_tokens, includes the bonus token (0.5.4-0.5.10);
        ``strict``: (accept_len - 1) / (num_draft_tokens - 1), drafts only (0.5.16+)."""
        if self.at_least("0.5.16"):
            return "strict"
        if self.at_least("0.5.4"):
            return "with_bonus"
        return "none"

    @property
    def accept_rate_description(self) -> str:
        return ACCEPT_RATE_DESCRIPTIONS[self.accept_rate_meaning]

    @property
    def eagle3_layers_from_draft_config(self) -> bool:
        """0.4.6 ignored the draft's eagle_config and always captured the default layers."""
        return self.at_least("0.4.7")

    @property
    def eagle3_single_layer_only(self) -> bool:
        """Before 0.5.23 an EAGLE-3 Llama draft must have exactly one layer."""
        return not self.at_least("0.5.23")

    def auto_spec_params(self, target_arch: str | None) -> tuple[int, int, int]:
        """(steps, topk, draft_tokens) SGLang picks when --speculative-num-steps is unset."""
        arch = target_arch or ""
        if "Llama" in arch or "Grok" in arch:
            return (5, 4, 8)
        deepseek_like = any(k in arch for k in ("Deepseek", "DeepSeek", "GptOss", "Bailing", "Glm4Moe"))
        if not self.at_least("0.4.10"):
            return (5, 4, 8)
        if deepseek_like or self.at_least("0.5.10"):
            return (3, 1, 4)
        return (5, 4, 8)

    def topk_with_paged_backends(self) -> tuple[str, ...] | None:
        """Attention backends that allow eagle topk > 1 with page size > 1.

        None means this version forces topk to 1 instead of refusing (0.4.x).
        """
        if self.at_least("0.5.23"):
            return ("flashinfer", "fa3", "triton")
        if self.at_least("0.5.10"):
            return ("flashinfer", "fa3")
        if self.at_least("0.5.4"):
            return ("flashinfer",)
        return None


ACCEPT_RATE_DESCRIPTIONS: dict[str, str] = {
    "none": "not reported by this version",
    "with_bonus": "accept_len / draft tokens, bonus token included (SGLang 0.5.4-0.5.10)",
    "strict": "(accept_len - 1) / (draft tokens - 1), drafts only (SGLang 0.5.16+)",
}


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a2 = a + (0,) * (n - len(a))
    b2 = b + (0,) * (n - len(b))
    return (a2 > b2) - (a2 < b2)


def capabilities(version: str | None) -> Capabilities:
    """Capabilities for ``version``; None (unknown) assumes ``NEWEST_KNOWN``."""
    if version:
        parse_version(version)
        return Capabilities(version=version)
    return Capabilities(version=NEWEST_KNOWN, assumed=True)


def resolve_capabilities(cfg, *, detect: bool = True) -> Capabilities:
    """The config's ``sglang_version`` override, else the detected one, else assumed.

    A simulated server has no serving environment to ask; without an override it
    is taken to be ``NEWEST_KNOWN``.
    """
    if cfg.sglang_version:
        return capabilities(cfg.sglang_version)
    if detect and not cfg.simulate:
        return capabilities(detect_version(cfg.python))
    return capabilities(None)
