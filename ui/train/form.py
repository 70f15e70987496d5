"""The Training page's form: a training run of the workspace created or edited (target, draft config,
training data — the workspace's regeneration outputs offered —, output folder, epochs or steps, batch size,
learning rate, max length, TTT length, TP size, GPUs, tracker), reviewed with its detected generation and
command (Gen-3's YAML), then written to the workspace file."""

from __future__ import annotations

import streamlit as st
from pydantic import ValidationError

from backend.train.command import CommandError
from backend.train.config import GENERATIONS, TRACKERS, TrackerConfig, TrainRunConfig
from backend.workspace import ConfigError
from ui import fmt
from ui.auth import control_lock, show_data_lock
from ui.components import code_span
from ui.context import actor
from ui.regen.live import known_runs as regen_outputs
from ui.train.control import command_preview, command_problems

OTHER = "another path (type it below)"
PENDING = "train-form-pending"
WHERE = ["local", "ray"]
WHERE_LABELS = {"local": "this machine", "ray": "the Ray cluster"}


def _defaults() -> dict:
    """Every field's default (a factory's value included), as a new run starts."""
    return {name: f.get_default(call_default_factory=True) for name, f in TrainRunConfig.model_fields.items()
            if not f.is_required()}


def _targets(rt) -> list[str]:
    """Target models the workspace already serves (a training target is usually one of them)."""
    seen: list[str] = []
    for n in rt.fleet.names():
        path = rt.fleet.config(n).model_path
        if path and path not in seen:
            seen.append(path)
    return seen


def _pick(label: str, options: list[str], current: str | None, key: str, help: str) -> str | None:
    """A choice among ``options`` or a typed path; returns the text to use (None when empty)."""
    opts = options + [OTHER]
    if current in options:
        index = opts.index(current)
    else:  # a new run starts from the first offer; a typed path of an edited run stays typed
        index = 0 if current is None and options else len(opts) - 1
    chosen = st.selectbox(label, opts, index=index, key=f"{key}-pick", help=help, persist_state="session")
    typed = st.text_input(f"{label}: another path", value="" if current in options else (current or ""),
                          key=f"{key}-typed", label_visibility="collapsed", placeholder=f"{label.lower()} path", persist_state="session")
    value = typed.strip() if chosen == OTHER else chosen
    return value or None


def _errors(exc: ValidationError) -> list[str]:
    out = []
    for e in exc.errors():
        where = ".".join(str(x) for x in e.get("loc", ())) or "config"
        msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        out.append(f"`{where}`: {msg}")
    return out


def run_form(rt, name: str | None = None) -> None:
    """Create a run (``name`` None) or edit run ``name``."""
    if show_data_lock(rt):  # its fields hold the workspace's paths and the run's command
        return
    editing = name is not None
    old = rt.train.config(name) if editing else None
    cur = old.model_dump() if old is not None else {**_defaults(), "tracker": TrackerConfig().model_dump()}
    set_before = old.model_fields_set if old is not None else set()
    k = f"train-form-{name or 'new'}"
    lock = control_lock(rt)
    with st.form(k):
        a, b, c = st.columns(3)
        run_name = a.text_input("Run name", value=name or "", key=f"{k}-name", disabled=editing,
                                help="letters, digits, '.', '_' or '-'; its log is logs/<name>.log", persist_state="session")
        python = b.text_input("Training environment's python", value=cur.get("python") or "python3",
                              key=f"{k}-python", help="SpecForge's generation is detected from it and its checkout", persist_state="session")
        gen = c.selectbox("SpecForge generation", GENERATIONS, index=GENERATIONS.index(cur.get("generation") or "auto"),
                          key=f"{k}-gen", help="auto: detected from the environment's package and checkout", persist_state="session")
        a, b = st.columns(2)
        with a:
            target = _pick("Target model", _targets(rt), cur.get("target_model"), f"{k}-target",
                           "the model whose hidden states the draft learns; the workspace's servers' targets are "
                           "offered")
            draft_cfg = st.text_input("Draft config (config.json; empty: derived from the target)",
                                      value=cur.get("draft_config") or "", key=f"{k}-draftcfg", persist_state="session")
            specforge_dir = st.text_input("SpecForge checkout (Gen-1/Gen-2 run its scripts/)",
                                          value=cur.get("specforge_dir") or "", key=f"{k}-sfdir", persist_state="session")
        with b:
            data = _pick("Training data", list(regen_outputs(rt)), cur.get("train_data"), f"{k}-data",
                         "JSONL conversations; the workspace's regeneration outputs are offered")
            out_dir = st.text_input("Output folder (empty: outputs/train/<name>)", value=cur.get("output_dir") or "",
                                    key=f"{k}-out", persist_state="session")
            entry = st.text_input("Entry (empty: SpecForge's own)", value=cur.get("entry") or "", key=f"{k}-entry",
                                  help="'module:PKG.MOD ARGS' runs a module with the generation's flags (the CPU "
                                       "trainer: 'module:backend.flows.tiny train'); 'script:PATH' a script", persist_state="session")
        c = st.columns(4)
        epochs = c[0].number_input("Epochs", 1, 100_000, int(cur.get("num_epochs") or 10), key=f"{k}-epochs", persist_state="session")
        max_steps = c[1].number_input("Max steps (0: by epochs)", 0, 10 ** 12, int(cur.get("max_steps") or 0),
                                      key=f"{k}-steps", persist_state="session")
        batch = c[2].number_input("Batch size", 1, 65_536, int(cur.get("batch_size") or 1), key=f"{k}-batch", persist_state="session")
        lr = c[3].number_input("Learning rate", 1e-9, 10.0, float(cur.get("learning_rate") or 1e-4),
                               format="%.2e", step=1e-5, key=f"{k}-lr", persist_state="session")
        c = st.columns(4)
        max_len = c[0].number_input("Max length", 1, 10_000_000, int(cur.get("max_length") or 2048), key=f"{k}-maxlen", persist_state="session")
        ttt = c[1].number_input("TTT length", 1, 64, int(cur.get("ttt_length") or 7), key=f"{k}-ttt",
                                help="draft positions trained per step (--ttt-length); a_i is logged for each", persist_state="session")
        tp = c[2].number_input("TP size", 1, 64, int(cur.get("tp_size") or 1), key=f"{k}-tp",
                               help="tensor parallelism of the target (Gen-3 keeps 1: set it on the capture server)", persist_state="session")
        gpus = c[3].text_input("GPUs (e.g. 0,1,2,3; empty: TP size processes)",
                               value=",".join(str(g) for g in cur.get("gpus") or []), key=f"{k}-gpus", persist_state="session")
        tr = cur.get("tracker") or {}
        c = st.columns(3)
        report = c[0].selectbox("Tracker", TRACKERS, index=TRACKERS.index(tr.get("report_to") or "none"),
                                key=f"{k}-tracker", help="tensorboard writes <output>/runs, which this page reads", persist_state="session")
        project = c[1].text_input("Tracker project (wandb, swanlab)", value=tr.get("project") or "",
                                  key=f"{k}-project", persist_state="session")
        run_label = c[2].text_input("Tracker run name", value=tr.get("run_name") or "", key=f"{k}-runname", persist_state="session")
        c = st.columns(2)
        capture = c[0].text_input("Gen-3 capture servers (online; URLs, space-separated)",
                                  value=" ".join(cur.get("capture_servers") or []), key=f"{k}-capture",
                                  help="the patched SGLang servers Gen-3 online training reads features from", persist_state="session")
        hidden = c[1].text_input("Prepared hidden states (offline training; empty: online)",
                                 value=cur.get("train_hidden_states") or "", key=f"{k}-hidden", persist_state="session")
        where = "local"
        if getattr(rt.workspace.config, "cluster", None) is not None:  # offered only where there is a cluster
            where = st.selectbox("Run on", WHERE, index=WHERE.index(cur.get("where") or "local"),
                                 format_func=WHERE_LABELS.get, key=f"{k}-where",
                                 help="ray: a job on the workspace's [cluster] that asks Ray for the run's GPUs "
                                      "(one per process); Ray picks them", persist_state="session")
        review = st.form_submit_button("Review", icon=":material/preview:", disabled=bool(lock),
                                       help=lock or "detect the generation with the environment's python and show "
                                                    "the command the run gets")
    if review:
        values = {"name": (name or run_name).strip(), "python": python.strip(), "generation": gen,
                  "target_model": target or "", "train_data": data or "", "draft_config": draft_cfg.strip() or None,
                  "specforge_dir": specforge_dir.strip() or None, "output_dir": out_dir.strip() or None,
                  "entry": entry.strip(), "num_epochs": int(epochs), "max_steps": int(max_steps) or None,
                  "batch_size": int(batch), "learning_rate": float(lr), "max_length": int(max_len),
                  "ttt_length": int(ttt), "tp_size": int(tp),
                  "capture_servers": capture.replace(",", " ").split(), "train_hidden_states": hidden.strip() or None,
                  "where": where}
        problems: list[str] = []
        try:
            values["gpus"] = [int(g) for g in gpus.replace(" ", "").split(",") if g] or None
        except ValueError:
            problems.append(f"`gpus`: {gpus!r} is not a list of GPU indices like 0,1,2,3")
        tracker = {"report_to": report, "project": project.strip() or None, "run_name": run_label.strip() or None}
        tracker = {f: v for f, v in tracker.items() if v not in (None, "none") or f in (tr or {})}
        defaults = _defaults()
        # write what differs from SpecForge's defaults, and what the entry had already
        kept = {f: v for f, v in values.items()
                if f in ("name", "target_model", "train_data") or f in set_before or v != defaults.get(f)}
        if tracker or "tracker" in set_before:
            kept["tracker"] = tracker
        if old is not None:  # the fields this form does not show are kept as they are
            for f in set_before - set(kept):
                kept[f] = getattr(old, f) if not isinstance(getattr(old, f), TrackerConfig) \
                    else getattr(old, f).model_dump(exclude_unset=True)
        try:
            cfg = TrainRunConfig.model_validate(kept) if not problems else None
        except ValidationError as exc:
            problems += _errors(exc)
            cfg = None
        if cfg is not None and not editing and cfg.name in rt.train.names():
            problems.append(f"`name`: a run named {cfg.name!r} exists already; choose another or edit it")
        built = None
        if not problems:
            # the review runs the typed python and reads the typed folders: the backend allows it (an
            # operator, folders under the workspace's roots) and audits it, once per press
            try:
                built = rt.review_train(actor(), cfg, name=name, source="dashboard")
            except CommandError as exc:
                built = exc
            except Exception as exc:  # refused (audited; says nothing of whether a path exists)
                problems.append(str(exc))
        if problems:
            st.error(fmt.data_markdown("**Not saved**:\n\n" + "\n".join(f"- {p}" for p in problems)))
            st.session_state.pop(PENDING, None)
        else:
            st.session_state[PENDING] = (name, cfg, built)
    pending = st.session_state.get(PENDING)
    if pending is None or pending[0] != name:
        return
    cfg, built = pending[1], pending[2]
    with st.container(border=True):
        on = (f" on the Ray cluster, asking it for {cfg.nproc} GPU{'s' if cfg.nproc != 1 else ''}"
              if cfg.where == "ray" else "")
        st.markdown(fmt.data_markdown(f"**{cfg.name}** will be {'updated' if editing else 'added'} in "
                                      f"{code_span(rt.workspace.config_path)} (comments kept) and run{on} as:"))
        if isinstance(built, CommandError):
            st.error(fmt.data_markdown(command_problems(built)))
            ok = False
        else:
            ok = command_preview(rt, cfg.name, cmd=built)
        row = st.container(horizontal=True)
        if not ok:
            st.caption("It can be saved as it is, and started once the problems above are fixed (here, or in the "
                       "workspace file).")
        if row.button("Save", key=f"{k}-save", type="primary", icon=":material/save:", disabled=bool(lock),
                      help=lock or None):
            try:
                rt.train.save(cfg, actor=actor(), source="dashboard")
            except (ConfigError, Exception) as exc:  # invalid (file:line: field), refused, or not writable
                st.error(f"Not saved: {exc}")
            else:
                rt.maybe_reload()
                st.session_state.pop(PENDING, None)
                if not editing:  # the new-run form starts empty again (its fields are kept across runs)
                    for key in [key for key in st.session_state if str(key).startswith(f"{k}-")]:
                        del st.session_state[key]
                st.session_state["train-run-wanted"] = cfg.name
                st.rerun()
        if row.button("Cancel", key=f"{k}-cancel"):
            st.session_state.pop(PENDING, None)
            st.rerun()
