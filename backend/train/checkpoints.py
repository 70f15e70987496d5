"""A training run's checkpoints: listed and inspected without loading weights.

Folder names by SpecForge generation (reference §1, §2): Gen-1 ``epoch_{N}``, Gen-2 ``epoch_{N}_step_{M}``,
Gen-3 ``{run_id}-step{N}`` with ``{run_id}-latest`` / ``{run_id}-best`` links and ``{run_id}.best_meta.json``
beside them.  A Gen-2 folder holds ``config.json`` + ``model.safetensors`` (with the ``d2t``/``t2d`` buffers) +
``training_state.pt`` and can be served as it is (a Gen-1 folder is read the same way); Gen-3 folders are
runtime checkpoints (training state per rank) that must be exported with ``specforge export --to sglang``
first.

Inspection reads ``config.json`` and the safetensors header through :mod:`backend.modelinfo` and
the small fields of ``training_state.pt`` through :mod:`backend.train.torchstate`; no tensor is loaded.

A checkpoint is verified, not trusted (:func:`verify_checkpoint`): each safetensors file must be exactly as
long as its header declares (8 bytes + header length + the largest data offset), each shard an index names
must be there, ``training_state.pt`` must unpickle (safely: no code from it runs) and a per-rank state must be a
whole archive.  A folder that fails is torn or incomplete (a write cut short by a crash, a power loss or a
full disk): it is listed with its problems, never served, and a resume falls back to the newest good one.
Whether one can be served as a target's EAGLE3 draft is :mod:`backend.flows.checkpoint_check`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.readcap import CONFIG_JSON_MAX, read_text_capped
from backend.modelinfo import DraftInfo, ModelInfoError, read_draft, read_json_config, read_safetensors_header
from backend.train.torchstate import StateReadError, TrainingState, check_archive, read_training_state

_GEN1 = re.compile(r"^epoch_([0-9]{1,9})$")
_GEN2 = re.compile(r"^epoch_([0-9]{1,9})_step_([0-9]{1,15})$")
_GEN3 = re.compile(r"^(?P<run>.+)-step(?P<step>[0-9]{1,15})$")
_GEN3_LINK = re.compile(r"^(?P<run>.+)-(?P<which>latest|best)$")
_RANK_STATE = re.compile(r"^training_state_rank[0-9]+\.pt$")
_LINK_FILE_MAX = 4095  # a link file names one folder; anything longer is not one


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    name: str
    generation: int  # 1, 2 or 3 by the folder's name
    epoch: int | None
    step: int | None
    run_id: str | None = None  # Gen-3
    latest: bool = False
    best: bool = False
    problems: tuple[str, ...] = ()  # why it is torn or incomplete (verify_checkpoint); empty when whole

    @property
    def torn(self) -> bool:
        return bool(self.problems)

    @property
    def order(self) -> tuple[int, int]:
        return (self.epoch if self.epoch is not None else -1, self.step if self.step is not None else -1)


@dataclass(frozen=True)
class RunCheckpoints:
    output_dir: Path
    checkpoints: tuple[Checkpoint, ...]  # oldest first
    latest: Checkpoint | None
    best: Checkpoint | None
    best_meta: dict[str, Any] | None = None  # Gen-3 {run_id}.best_meta.json, as saved
    problems: tuple[str, ...] = ()  # links that point nowhere, unreadable metadata
    latest_good: Checkpoint | None = None  # the newest checkpoint that is not torn: what a resume continues from

    @property
    def torn(self) -> tuple[Checkpoint, ...]:
        return tuple(c for c in self.checkpoints if c.torn)


# -- verification -----------------------------------------------------------------------------------

def safetensors_problem(path: str | Path) -> str | None:
    """Whether a safetensors file is whole: its header (read by :mod:`backend.modelinfo`) must parse and the
    file must be exactly 8 + header length + the largest ``data_offsets`` end bytes long.  None when whole."""
    f = Path(path)
    try:
        read_safetensors_header(f)
    except ModelInfoError as exc:
        return str(exc)
    try:
        with open(f, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n).decode("utf-8"))
    except (OSError, ValueError, struct.error) as exc:  # changed under us since the header was read
        return f"{f}: cannot read: {getattr(exc, 'strerror', None) or exc}"
    end = 0
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        offs = meta.get("data_offsets") if isinstance(meta, dict) else None
        if not (isinstance(offs, list) and len(offs) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in offs) and 0 <= offs[0] <= offs[1]):
            return f"{f}: header entry {name!r} has no valid data_offsets [begin, end]"
        end = max(end, offs[1])
    want = 8 + n + end
    if size < want:
        return (f"{f}: {size:,} bytes, but its header declares {want:,} (8 + {n:,} header + {end:,} data): "
                f"{want - size:,} bytes missing, truncated")
    if size > want:
        return (f"{f}: {size:,} bytes, {size - want:,} more than its header declares ({want:,}): "
                "not a whole safetensors file")
    return None


def _weight_files(p: Path) -> tuple[list[Path], list[str]]:
    """The safetensors files of a folder (an index's shards, else ``*.safetensors``) and what is missing."""
    index = p / "model.safetensors.index.json"
    if index.exists():
        try:
            wm = read_json_config(index).get("weight_map")
        except ModelInfoError as exc:
            return [], [str(exc)]
        if not isinstance(wm, dict):
            return [], [f"{index}: field 'weight_map' is missing or not an object"]
        files = [p / str(name) for name in sorted(set(wm.values()))]
        missing = [f"{f}: missing (listed in {index.name})" for f in files if not f.is_file()]
        return [f for f in files if f.is_file()], missing
    return sorted(e for e in p.glob("*.safetensors") if e.is_file()), []


def _verify(p: Path) -> tuple[str, ...]:
    problems: list[str] = []
    try:
        names = {e.name for e in p.iterdir()}
    except OSError as exc:
        return (f"{p}: cannot list: {exc.strerror or exc}",)
    rank_states = sorted(n for n in names if _RANK_STATE.match(n))
    runtime = _generation_of(p.name) == 3 or bool(rank_states)
    if "config.json" in names:
        cp = p / "config.json"
        try:
            too_big = cp.stat().st_size > CONFIG_JSON_MAX  # refused by the reader's cap, not damaged
        except OSError:
            too_big = False
        if not too_big:
            try:
                read_json_config(cp)
            except ModelInfoError as exc:
                problems.append(str(exc))
    elif not runtime:
        problems.append(f"{p / 'config.json'}: missing: incomplete")
    files, missing = _weight_files(p)
    problems += missing
    for f in files:
        why = safetensors_problem(f)
        if why:
            problems.append(why)
    if not runtime and not files and not missing and not any(
            n.endswith((".bin", ".pt")) and not n.startswith("training_state") for n in names):
        problems.append(f"{p}: no weight file (model.safetensors): incomplete")
    if "training_state.pt" in names:
        try:
            read_training_state(p / "training_state.pt")
        except StateReadError as exc:
            if exc.damaged:
                problems.append(str(exc))
    for n in rank_states:
        why = check_archive(p / n)
        if why:
            problems.append(why)
    return tuple(problems)


def _signature(p: Path) -> tuple | None:
    try:
        out = []
        for e in sorted(p.iterdir()):
            st = e.stat()
            out.append((e.name, st.st_size, st.st_mtime_ns))
        return tuple(out)
    except OSError:
        return None


@functools.lru_cache(maxsize=1024)
def _verify_cached(path: str, signature: tuple) -> tuple[str, ...]:  # noqa: ARG001 (part of the key)
    return _verify(Path(path))


def verify_checkpoint(path: str | Path) -> tuple[str, ...]:
    """Why the checkpoint folder ``path`` is torn or incomplete, one line per problem naming the file;
    empty when it is whole.  Results are kept while no file in the folder changes size or time."""
    p = Path(path)
    sig = _signature(p)
    if sig is None:
        return _verify(p)
    return _verify_cached(str(p), sig)


def _gen3_link(entry: Path) -> Path | None:
    """Where a Gen-3 ``-latest``/``-best`` link points (a symlink, or a small file naming the folder)."""
    try:
        if entry.is_symlink():
            return (entry.parent / os.readlink(entry)).resolve()
        if entry.is_file():
            text, cut = read_text_capped(entry, _LINK_FILE_MAX)
            name = "" if cut else text.strip()
            return (entry.parent / name).resolve() if name else None
    except OSError:
        return None
    return entry.resolve() if entry.is_dir() else None


def list_checkpoints(output_dir: str | Path, run_id: str | None = None, *, verify: bool = True) -> RunCheckpoints:
    """The checkpoints of the run writing to ``output_dir`` (only ``run_id``'s for Gen-3 when given).

    Latest: Gen-3's ``-latest`` link, else the highest (epoch, step).  Best: Gen-3's ``-best`` link;
    Gen-1 and Gen-2 keep no best checkpoint, so it is None for them.  ``verify``: each checkpoint is
    verified (:func:`verify_checkpoint`); a torn one keeps its latest mark, with its problems beside it,
    and ``latest_good`` names the newest one that is whole."""
    d = Path(output_dir)
    found: list[Checkpoint] = []
    links: dict[tuple[str, str], Path | None] = {}
    problems: list[str] = []
    try:
        entries = sorted(d.iterdir())
    except FileNotFoundError:
        return RunCheckpoints(d, (), None, None, problems=(f"{d}: folder not found",))
    except OSError as exc:
        return RunCheckpoints(d, (), None, None, problems=(f"{d}: cannot list: {exc.strerror or exc}",))
    for e in entries:
        name = e.name
        m3l = _GEN3_LINK.match(name)
        if m3l and (run_id is None or m3l.group("run") == run_id):
            links[(m3l.group("run"), m3l.group("which"))] = _gen3_link(e)
            continue
        if e.is_symlink() or not e.is_dir():
            continue
        m = _GEN2.match(name)
        if m:
            found.append(Checkpoint(e, name, 2, int(m.group(1)), int(m.group(2))))
            continue
        m = _GEN1.match(name)
        if m:
            found.append(Checkpoint(e, name, 1, int(m.group(1)), None))
            continue
        m = _GEN3.match(name)
        if m and (run_id is None or m.group("run") == run_id):
            found.append(Checkpoint(e, name, 3, None, int(m.group("step")), run_id=m.group("run")))
    found.sort(key=lambda c: (c.generation, c.run_id or "", c.order))
    latest_path = best_path = None
    for (run, which), target in links.items():
        if target is None or not target.is_dir():
            problems.append(f"{d / f'{run}-{which}'}: points to a folder that does not exist")
            continue
        if which == "latest":
            latest_path = target
        else:
            best_path = target
    resolved = {c.path.resolve(): c for c in found}
    latest = resolved.get(latest_path) if latest_path else None
    if latest is None and found:
        latest = max(found, key=lambda c: c.order)
    best = resolved.get(best_path) if best_path else None
    marked = tuple(Checkpoint(c.path, c.name, c.generation, c.epoch, c.step, c.run_id,
                              latest=c is latest, best=c is best,
                              problems=verify_checkpoint(c.path) if verify else ()) for c in found)
    meta = None
    runs = {c.run_id for c in found if c.run_id} | ({run_id} if run_id else set())
    for run in sorted(runs):
        mp = d / f"{run}.best_meta.json"
        if mp.is_file():
            try:
                meta = read_json_config(mp)
            except ModelInfoError as exc:
                problems.append(str(exc))
    pick = {c.path: c for c in marked}
    good = [c for c in marked if not c.torn]
    newest_good = None
    if good:
        top = pick.get(latest.path) if latest else None
        newest_good = top if top is not None and not top.torn else max(good, key=lambda c: c.order)
    return RunCheckpoints(d, marked, pick.get(latest.path) if latest else None,
                          pick.get(best.path) if best else None, meta, tuple(problems), newest_good)


# -- inspection -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CheckpointInfo:
    path: Path
    generation: int | None  # by the folder's name, when it tells
    runtime: bool  # a Gen-3 runtime checkpoint (by name, or per-rank training states inside)
    servable: bool
    why_not_servable: str | None
    export_argv: tuple[str, ...] | None  # the `specforge export --to sglang` command to offer
    draft: DraftInfo | None  # config.json and safetensors header, as the Servers page reads them
    config_error: str | None
    state: TrainingState | None
    state_error: str | None
    rank_states: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    damage: tuple[str, ...] = ()  # why it is torn or incomplete (verify_checkpoint); empty when whole

    @property
    def torn(self) -> bool:
        return bool(self.damage)

    @property
    def fc_shape(self) -> tuple[int, ...] | None:
        return self.draft.fc_weight.shape if self.draft and self.draft.fc_weight else None

    @property
    def has_d2t(self) -> bool:
        return bool(self.draft and self.draft.d2t is not None)

    @property
    def has_t2d(self) -> bool:
        return bool(self.draft and self.draft.t2d is not None)

    @property
    def draft_vocab(self) -> int | None:
        """Rows of lm_head (the draft vocabulary), else the config's draft_vocab_size."""
        if self.draft is None:
            return None
        lm = self.draft.lm_head
        return lm.shape[0] if lm is not None and lm.shape else self.draft.draft_vocab_size

    @property
    def layers(self) -> int | None:
        if self.draft is None:
            return None
        n = self.draft.weight_layer_count
        return n if n is not None else self.draft.num_hidden_layers

    def summary(self) -> dict[str, Any]:
        d = self.draft
        return {
            "path": str(self.path), "generation": self.generation, "runtime": self.runtime,
            "servable": self.servable,
            "why_not_servable": self.why_not_servable,
            "torn": self.torn, "damage": list(self.damage),
            "export_command": list(self.export_argv) if self.export_argv else None,
            "architectures": list(d.architectures) if d else None,
            "hidden_size": d.hidden_size if d else None,
            "fc_weight_shape": list(self.fc_shape) if self.fc_shape else None,
            "layers": self.layers, "vocab_size": d.vocab_size if d else None, "draft_vocab": self.draft_vocab,
            "d2t": self.has_d2t, "t2d": self.has_t2d,
            "weight_files": list(d.weight_files) if d else [], "weights_error": d.weights_error if d else None,
            "config_error": self.config_error,
            "epoch": self.state.epoch if self.state else None, "step": self.state.step if self.state else None,
            "state_error": self.state_error, "rank_states": list(self.rank_states), "notes": list(self.notes),
        }


def export_argv(checkpoint: str | Path, draft_config: str | Path, output_dir: str | Path) -> tuple[str, ...]:
    """``specforge export --to sglang`` for a Gen-3 runtime checkpoint (as an argv list)."""
    return ("specforge", "export", "--to", "sglang", "--checkpoint", str(checkpoint),
            "--draft-config", str(draft_config), "--output-dir", str(output_dir))


def _generation_of(name: str) -> int | None:
    if _GEN2.match(name):
        return 2
    if _GEN1.match(name):
        return 1
    if _GEN3.match(name) or _GEN3_LINK.match(name):
        return 3
    return None


def inspect_checkpoint(path: str | Path, *, draft_config: str | Path | None = None,
                       export_dir: str | Path | None = None) -> CheckpointInfo:
    """Everything about one checkpoint folder that can be read without loading a tensor.

    ``draft_config``: the run's draft config (``model.draft_model_config`` of a Gen-3 YAML), used in the
    export command offered for a runtime checkpoint; ``export_dir`` where the export goes (default: a
    ``-sglang`` folder beside the checkpoint)."""
    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: not a checkpoint folder")
    gen = _generation_of(p.name)
    notes: list[str] = []
    try:
        rank_states = tuple(sorted(e.name for e in p.iterdir() if _RANK_STATE.match(e.name)))
    except OSError:
        rank_states = ()
    draft = None
    config_error = None
    if (p / "config.json").is_file():
        try:
            draft = read_draft(p)
        except ModelInfoError as exc:
            config_error = str(exc)
    else:
        config_error = f"{p}: no config.json"
    state = None
    state_error = None
    sp = p / "training_state.pt"
    if sp.is_file():
        try:
            state = read_training_state(sp)
        except StateReadError as exc:
            state_error = str(exc)
    elif not rank_states:
        state_error = f"{sp}: not present"
    has_weights = draft is not None and bool(draft.tensors)
    runtime = gen == 3 or bool(rank_states)
    damage = verify_checkpoint(p)
    why = None
    argv = None
    if damage:
        why = (f"torn or incomplete ({len(damage)} problem{'s' if len(damage) > 1 else ''}): {damage[0]}"
               + (f" (and {len(damage) - 1} more)" if len(damage) > 1 else ""))
    if runtime:
        why = why or ("a SpecForge runtime checkpoint (training state per rank): SGLang cannot load it; "
                      "export it with `specforge export --to sglang` first")
        out_dir = Path(export_dir) if export_dir else p.parent / f"{p.name}-sglang"
        if damage:
            pass  # an export of a torn checkpoint would fail or write a broken draft: none is offered
        elif draft_config is not None:
            argv = export_argv(p, draft_config, out_dir)
        else:
            notes.append("the export needs the run's draft config (model.draft_model_config in its YAML)")
    elif why is not None:
        pass
    elif draft is None:
        why = config_error or "no config.json"
    elif not has_weights and not draft.weight_files:
        why = draft.weights_error or "no weight file"
    elif not has_weights:
        notes.append(f"weights not inspected: {draft.weights_error}")
    if draft is not None and has_weights and draft.kind == "eagle3":
        if draft.d2t is None:
            notes.append("no d2t tensor: draft token ids cannot be mapped to target ids")
        has_norm = any(k == "norm.weight" or k.endswith(".norm.weight") for k in draft.tensors)
        for name, present in (("fc.weight", draft.fc_weight), ("lm_head.weight", draft.lm_head),
                              ("norm.weight", has_norm or None)):
            if present is None:
                notes.append(f"no {name} tensor (SpecForge's exporter requires it)")
    return CheckpointInfo(p, gen, runtime, why is None, why, argv, draft, config_error, state, state_error, rank_states,
                          tuple(notes), damage)
