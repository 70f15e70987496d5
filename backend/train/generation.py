"""Which SpecForge generation (and version) a training run drives.

The entry point changed three times (reference §0, §8): Gen-1 ``scripts/train_eagle3_online.py``, Gen-2
``scripts/train_eagle3.py`` (from 2025-11-20), Gen-3 ``specforge train --config`` (from 2026-07-13; the
package has ``specforge/cli.py`` and the scripts are gone).  The answer comes from two places:

* the training environment's interpreter, asked in a short subprocess with a timeout (as
  backend.sglang.version asks for sglang's version): the ``specforge`` version from its package
  metadata, where the package lives, whether it has ``cli.py`` and whether the ``specforge`` console
  script is installed.  Nothing is imported from the package (that would load torch);
* the run's ``specforge_dir`` checkout: ``scripts/train_eagle3.py``, ``scripts/train_eagle3_online.py``,
  ``specforge/cli.py`` and ``version.txt``.

Rule (§8): ``cli.py`` present and ``scripts/train_eagle3.py`` absent → Gen-3; else
``scripts/train_eagle3.py`` → Gen-2; else ``scripts/train_eagle3_online.py`` → Gen-1.  A generation
chosen in the config wins over detection (the version is still read, for the resume warning).
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from backend.readcap import SMALL_TEXT_MAX, read_text_capped
from backend.pyprobe import end_probe_group

GEN2_SCRIPT = "scripts/train_eagle3.py"
GEN1_SCRIPT = "scripts/train_eagle3_online.py"
GEN1_OFFLINE_SCRIPT = "scripts/train_eagle3_offline.py"
GEN3_CLI = "specforge/cli.py"

# Runs in the training interpreter: metadata and file locations only, no import of specforge.
_PROBE = r"""
import importlib.metadata as m, importlib.util as u, json, os, sysconfig
out = {"version": None, "package_dir": None, "cli": False, "console_script": None}
try:
    out["version"] = m.version("specforge")
except Exception:
    pass
try:
    spec = u.find_spec("specforge")
except Exception:
    spec = None
if spec is not None:
    locs = list(spec.submodule_search_locations or [])
    if locs:
        out["package_dir"] = locs[0]
        out["cli"] = os.path.isfile(os.path.join(locs[0], "cli.py"))
try:
    if any(e.name == "specforge" for e in m.entry_points(group="console_scripts")):
        p = os.path.join(sysconfig.get_path("scripts"), "specforge")
        out["console_script"] = p if os.path.exists(p) else None
except Exception:
    pass
print(json.dumps(out))
"""

_cache: dict[str, "EnvProbe"] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class EnvProbe:
    """What the training interpreter says about its ``specforge`` package."""

    python: str
    ok: bool  # the interpreter ran and answered
    version: str | None = None
    package_dir: str | None = None
    cli: bool = False
    console_script: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class GenerationInfo:
    """The generation a run drives, how that was decided, and the facts the command needs."""

    generation: str | None  # "gen1" | "gen2" | "gen3"; None when nothing tells
    version: str | None  # specforge version (package metadata, else the checkout's version.txt)
    chosen: bool  # set in the config rather than detected
    evidence: tuple[str, ...] = ()
    console_script: str | None = None  # the ``specforge`` command of the environment (Gen-3)
    problems: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        if self.generation is None:
            return "unknown"
        how = "chosen" if self.chosen else "detected"
        ver = f", SpecForge {self.version}" if self.version else ""
        return f"Gen-{self.generation[-1]} ({how}{ver})"


def probe_env(python: str, *, timeout_s: float = 20.0, use_cache: bool = True) -> EnvProbe:
    """Ask ``python`` about its specforge package (cached per interpreter path for the process's life)."""
    if use_cache:
        with _cache_lock:
            if python in _cache:
                return _cache[python]
    result: EnvProbe
    try:
        proc = subprocess.Popen([python, "-c", _PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    except OSError as exc:
        result = EnvProbe(python, False, error=f"cannot run {python}: {exc.strerror or exc}")
    else:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            end_probe_group(proc)
            result = EnvProbe(python, False, error=f"{python} did not answer within {timeout_s:g} s")
        else:
            result = _read_probe(python, proc.returncode, out, err)
    with _cache_lock:
        _cache[python] = result
    return result


def _read_probe(python: str, code: int, out: str, err: str) -> EnvProbe:
    lines = out.strip().splitlines()
    if code != 0 or not lines:
        tail = (err.strip().splitlines() or ["no output"])[-1]
        return EnvProbe(python, False, error=f"{python} exited with {code}: {tail}")
    try:
        d = json.loads(lines[-1])
        return EnvProbe(python, True, version=d.get("version") or None, package_dir=d.get("package_dir") or None,
                        cli=bool(d.get("cli")), console_script=d.get("console_script") or None)
    except (ValueError, AttributeError):
        return EnvProbe(python, False, error=f"{python} gave an answer that is not the probe's: {lines[-1][:200]!r}")


def clear_cache(python: str | None = None) -> None:
    """Forget what ``python`` (default: every interpreter) answered, so the next probe asks again."""
    with _cache_lock:
        if python is None:
            _cache.clear()
        else:
            _cache.pop(python, None)


def _checkout_version(specforge_dir: Path) -> str | None:
    try:
        text = read_text_capped(specforge_dir / "version.txt", SMALL_TEXT_MAX, errors="strict")[0].strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text.splitlines()[0].strip() if text else None


def detect_generation(python: str, specforge_dir: str | None = None, chosen: str = "auto", *,
                      probe: EnvProbe | None = None, timeout_s: float = 20.0) -> GenerationInfo:
    """The generation for a run with interpreter ``python`` and checkout ``specforge_dir``.

    ``chosen`` other than ``auto`` is taken as it is.  ``probe`` replaces asking the interpreter.
    """
    env = probe if probe is not None else probe_env(python, timeout_s=timeout_s)
    evidence: list[str] = []
    problems: list[str] = []
    if not env.ok:
        problems.append(env.error or f"{python} did not answer")
    elif env.package_dir:
        evidence.append(f"{python}: specforge {env.version or '(no version in its metadata)'} at {env.package_dir}"
                        + (" with cli.py" if env.cli else ""))
    else:
        evidence.append(f"{python}: no specforge package installed")
    d = Path(specforge_dir).expanduser() if specforge_dir else None
    has_gen2 = has_gen1 = has_cli = False
    version = env.version
    if d is not None:
        if not d.is_dir():
            problems.append(f"specforge_dir {d} is not a folder")
        else:
            has_gen2 = (d / GEN2_SCRIPT).is_file()
            has_gen1 = (d / GEN1_SCRIPT).is_file() or (d / GEN1_OFFLINE_SCRIPT).is_file()
            has_cli = (d / GEN3_CLI).is_file()
            found = [p for p, ok in ((GEN2_SCRIPT, has_gen2), (GEN1_SCRIPT, has_gen1), (GEN3_CLI, has_cli)) if ok]
            evidence.append(f"{d}: " + (", ".join(found) if found else "none of the training entry points"))
            version = version or _checkout_version(d)
    has_cli = has_cli or env.cli
    if chosen != "auto":
        gen: str | None = chosen
    elif has_cli and not has_gen2:
        gen = "gen3"
    elif has_gen2:
        gen = "gen2"
    elif has_gen1:
        gen = "gen1"
    else:
        gen = None
        where = f"{d}/scripts" if d is not None else "a specforge_dir checkout (none set)"
        problems.append(f"no SpecForge entry point found: {python} has no specforge with cli.py and "
                        f"{where} has neither train_eagle3.py nor train_eagle3_online.py; set specforge_dir "
                        "or choose the generation")
    return GenerationInfo(generation=gen, version=version, chosen=chosen != "auto", evidence=tuple(evidence),
                          console_script=env.console_script, problems=tuple(problems))


__all__ = ["EnvProbe", "GenerationInfo", "clear_cache", "detect_generation", "probe_env"]
