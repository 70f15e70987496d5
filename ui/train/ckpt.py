"""The Training page's checkpoints: the run's list (latest and best marked), one inspected without loading
weights, Gen-3 runtime checkpoints flagged with the export command, and preflight against a target."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pandas as pd
import streamlit as st

from backend.modelinfo import ModelInfoError, read_json_config
from backend.flows.checkpoint_check import preflight_checkpoint
from backend.train.checkpoints import CheckpointInfo, RunCheckpoints, inspect_checkpoint, list_checkpoints
from ui import fmt
from ui.auth import control_lock, data_lock, fragment_run, live_fragment, typed_path
from ui.components import code_span, findings_list, path_text
from ui.train import per_dataset
from ui.train.curves import bench_results
from ui.train.data import RunRef, measured
from ui.train.follow import recheck_followed

GEN_NAMES = {1: "Gen-1 (epoch_N)", 2: "Gen-2 (epoch_N_step_M)", 3: "Gen-3 runtime ({run}-stepN)"}
REFRESH_S = 5
MANAGED, FOLDER = "a managed server's target", "a folder"


def _key(ref: RunRef) -> str:
    return f"train-ckpt-{ref.name}"


def chosen(ref: RunRef) -> str | None:
    """The checkpoint folder picked in the Checkpoints tab for ``ref`` (None before one is picked)."""
    return st.session_state.get(_key(ref))


def newest(ref: RunRef) -> str | None:
    """The run's newest checkpoint folder, as the Checkpoints tab inspects it by default (None: none yet)."""
    if ref.output_dir is None or not ref.output_dir.exists():
        return None
    run = list_checkpoints(ref.output_dir, ref.run_id)
    return str(run.latest.path) if run.latest else None


def deploy_target(ref: RunRef) -> str | None:
    """The checkpoint the Deploy tab offers: the newest while the Checkpoints tab's "Newest" is on (as it is
    until turned off), else the one picked there.  Noted, so that where both tabs are drawn together the
    Checkpoints tab's live part draws the page again when the run saves a newer one (or another is picked)
    and the Deploy tab would offer another."""
    path = _target(ref)
    st.session_state[f"{_key(ref)}-deploying"] = path
    return path


def _target(ref: RunRef) -> str | None:
    return newest(ref) if st.session_state.get(f"{_key(ref)}-newest", True) else (chosen(ref) or newest(ref))


@live_fragment(run_every=REFRESH_S)
def follow_for_deploy(ref: RunRef) -> None:
    """Live, beside the Deploy tab drawn without the Checkpoints tab: when the checkpoint Deploy would offer
    is no longer the one it offers (the run saved a newer one), the page is drawn again, so Deploy offers it
    without a reload.  Call it before :func:`deploy_target`."""
    if fragment_run() and st.session_state.get(f"{_key(ref)}-deploying") != _target(ref):
        st.rerun(scope="app")


def not_deploying(ref: RunRef) -> None:
    """The Deploy tab is not drawn in this run: nothing it offered is to be kept up to date (else the
    Checkpoints tab's live part would draw the page again at each refresh, for a tab that is not there)."""
    st.session_state.pop(f"{_key(ref)}-deploying", None)


def _table(run: RunCheckpoints, meas: dict[str, float]) -> pd.DataFrame:
    rows = []
    for c in reversed(run.checkpoints):  # newest first
        marks = [m for m, on in (("latest", c.latest), ("best", c.best)) if on]
        try:
            written = time.strftime("%m-%d %H:%M", time.localtime(c.path.stat().st_mtime))
        except OSError:
            written = fmt.NA
        if c.torn:
            marks.insert(0, "TORN")
        rows.append({"checkpoint": c.name, "marks": " · ".join(marks), "epoch": fmt.count(c.epoch), "step": fmt.count(c.step),
                     "servable": "no: torn or incomplete" if c.torn else "export first" if c.generation == 3 else "yes",
                     "measured accept_len": fmt.accept_len(meas.get(c.name)), "written": written})
    return pd.DataFrame(rows)


@live_fragment(run_every=REFRESH_S)
def checkpoints_tab(rt, ref: RunRef) -> None:
    """Live: a checkpoint the run saves appears without a reload."""
    recheck_followed(rt, [ref])
    hidden = bool(data_lock(rt))  # the workspace's paths and the run's arguments
    if ref.output_dir is None:
        st.info("This run has no output folder, so it has no checkpoints to list.", icon=":material/info:")
        return
    if not ref.output_dir.exists():
        st.info(fmt.data_markdown(f"No checkpoint yet: {path_text(ref.output_dir, hidden)} does not exist yet (the "
                                  "run creates it when it starts)."), icon=":material/info:")
        return
    run = list_checkpoints(ref.output_dir, ref.run_id)
    for p in run.problems:
        st.warning(fmt.data_markdown(p), icon=":material/warning:")
    if not run.checkpoints:
        if not run.problems:
            st.info(fmt.data_markdown(f"No checkpoint yet in {path_text(ref.output_dir, hidden)}: SpecForge saves "
                                      "one every `--save-interval` steps (Gen-2 0.2.0 only at intervals; later "
                                      "versions also at the end)."), icon=":material/info:")
        return
    meas = {m.checkpoint: m.accept_len for m in measured(bench_results(rt), run.checkpoints)}
    gens = sorted({c.generation for c in run.checkpoints})
    latest = (f"**{run.latest.name}**" + (" (torn)" if run.latest.torn else "")) if run.latest else f"**{fmt.NA}**"
    st.markdown(fmt.data_markdown(f"**{len(run.checkpoints)} checkpoint(s)** in {path_text(ref.output_dir, hidden)} · "
                                  + ", ".join(GEN_NAMES[g] for g in gens)
                                  + f" · latest {latest}"
                                  + (f" · newest good **{run.latest_good.name if run.latest_good else fmt.NA}**"
                                     if run.torn else "")
                                  + f" · best **{run.best.name if run.best else fmt.NA}**"))
    for c in reversed(run.torn):
        why = c.problems[0] if not hidden else c.problems[0].replace(str(c.path) + "/", "")
        more = f" (and {len(c.problems) - 1} more)" if len(c.problems) > 1 else ""
        st.error(fmt.data_markdown(f"**{c.name} is torn or incomplete**: {code_span(why)}{more}. It cannot be "
                                   "served or resumed from; a resume continues from "
                                   + (f"**{run.latest_good.name}**" if run.latest_good else "step 0 (no good one)")
                                   + "."), icon=":material/broken_image:")
    if run.best is None:
        st.caption("best: N/A — Gen-1 and Gen-2 keep no best checkpoint; Gen-3 marks one with its `-best` link")
    table = _table(run, meas)
    st.dataframe(table, hide_index=True, key="train-ckpt-table",
                 column_config={"measured accept_len": st.column_config.TextColumn(
                     help="the latest benchmark whose draft was this checkpoint; N/A: none yet")})
    st.download_button("Download CSV", table.to_csv(index=False).encode(), file_name=f"{ref.name}-checkpoints.csv",
                       mime="text/csv", key="train-ckpt-csv", icon=":material/download:")
    per_dataset.panel(bench_results(rt), run.checkpoints, key=f"{_key(ref)}-ckpt")
    if run.best_meta:
        with st.expander("Best checkpoint metadata (best_meta.json)"):
            st.json(run.best_meta)
    names = [c.name for c in reversed(run.checkpoints)]
    by_name = {c.name: c for c in run.checkpoints}
    key = _key(ref)
    pick_key = f"{key}-pick"
    row = st.container(horizontal=True, vertical_alignment="bottom")
    newest = row.toggle("Newest", value=True, key=f"{key}-newest",
                        help="inspect the newest checkpoint, also as the run saves more; turn off to pick one", persist_state="session")
    if newest or st.session_state.get(pick_key) not in names:
        st.session_state[pick_key] = run.latest.name if run.latest else names[0]
    pick = row.selectbox("Inspect", names, key=pick_key, disabled=newest, persist_state="session")
    path = str(by_name[pick].path)
    st.session_state[key] = path
    if fragment_run() and st.session_state.get(f"{key}-deploying", path) != path:
        # a newer checkpoint saved, or another picked: the Deploy tab, drawn with the page, offers this one
        st.rerun(scope="app")
    _inspect(rt, ref, by_name[pick].path, hidden)


def _inspect(rt, ref: RunRef, path: Path, hidden: bool = False) -> None:
    draft_config = ref.draft_config or st.session_state.get(f"train-ckpt-draftcfg-{ref.name}") or None
    try:
        info = inspect_checkpoint(path, draft_config=draft_config)
    except FileNotFoundError as exc:
        st.error(fmt.data_markdown(exc))
        return
    if info.runtime:
        st.error(fmt.data_markdown(f"**Not servable**: {code_span(path.name)} is {info.why_not_servable}."),
                 icon=":material/block:")
        if hidden:
            st.caption("The export command (it names the run's folders) is shown to signed-in users.")
        elif info.export_argv:
            st.code(shlex.join(info.export_argv), language="bash", wrap_lines=True)
            st.caption("Run it in the SpecForge environment; the exported folder is what a server's "
                       "`--speculative-draft-model-path` takes.")
        else:
            st.text_input("The run's draft config (model.draft_model_config of its YAML)",
                          key=f"train-ckpt-draftcfg-{ref.name}", placeholder="configs/llama3-8B-eagle3.json",
                          help="needed by the export command; it is filled in here once given", persist_state="session")
            st.code(f"specforge export --to sglang --checkpoint {shlex.quote(str(path))} --draft-config "
                    f"<the run's draft config> --output-dir {shlex.quote(str(path.parent / (path.name + '-sglang')))}",
                    language="bash", wrap_lines=True)
    elif not info.servable:
        st.error(fmt.data_markdown(f"**Not servable**: {info.why_not_servable}"), icon=":material/block:")
    for why in info.damage[1:]:
        st.caption(fmt.data_markdown(f"also torn: {code_span(why)}"))
    _facts(info)
    for note in info.notes:
        st.warning(fmt.data_markdown(note), icon=":material/warning:")
    if (path / "config.json").is_file():
        with st.expander("config.json"):
            try:
                st.json(read_json_config(path / "config.json"))
            except ModelInfoError as exc:
                st.error(fmt.data_markdown(exc))
    if info.state is not None and info.state.args and not hidden:  # the run's arguments name its data
        with st.expander(f"training_state.pt args ({len(info.state.args)})"):
            st.dataframe(pd.DataFrame([{"arg": k, "value": str(v)} for k, v in sorted(info.state.args.items())]),
                         hide_index=True, key="train-ckpt-args")
    _preflight(rt, ref, path, info, draft_config)


def _facts(info: CheckpointInfo) -> None:
    d = info.draft
    c = st.columns(3) + st.columns(3)  # two rows: nothing cut at 1024 px
    shape = " × ".join(f"{n:,}" for n in info.fc_shape) if info.fc_shape else fmt.NA
    c[0].metric("fc.weight", shape, help="hidden × (aux layers × target hidden): its width must be 3 × the "
                "target's hidden size" if info.fc_shape else "N/A: no fc.weight in the weights' header")
    c[1].metric("layers", fmt.count(info.layers) if info.layers is not None else fmt.NA,
                help="decoder layers in the weights (the config's num_hidden_layers when not readable)")
    vocab = d.vocab_size if d else None
    c[2].metric("vocab (target / draft)", f"{fmt.count(vocab)} / {fmt.count(info.draft_vocab)}",
                help="vocab_size of config.json / rows of lm_head (draft_vocab_size when not readable)")
    c[3].metric("d2t / t2d", f"{'✓' if info.has_d2t else '✕'} / {'✓' if info.has_t2d else '✕'}",
                help="the vocab mapping buffers: d2t maps a draft token to its target id (an offset); t2d marks "
                     "the target tokens in the draft vocab")
    st_ = info.state
    c[4].metric("epoch / step", f"{fmt.count(st_.epoch) if st_ else fmt.NA} / {fmt.count(st_.step) if st_ else fmt.NA}",
                help="from training_state.pt (read without loading it)" if st_ else
                f"N/A: {info.state_error or 'no training_state.pt'}")
    c[5].metric("hidden size", fmt.count(d.hidden_size) if d and d.hidden_size is not None else fmt.NA,
                help="the draft's hidden_size (config.json)")
    arch = ", ".join(d.architectures) if d and d.architectures else fmt.NA
    st.caption(fmt.data_markdown(f"architecture **{arch}** · weights "
                                 f"{', '.join(d.weight_files) if d and d.weight_files else fmt.NA}"))
    if info.config_error:
        st.error(fmt.data_markdown(info.config_error))
    if d is not None and d.weights_error:
        st.warning(fmt.data_markdown(f"Weights' header: {d.weights_error}"), icon=":material/warning:")
    if info.rank_states:
        st.caption(fmt.data_markdown(f"per-rank training states: {', '.join(info.rank_states)}"))


def _preflight(rt, ref: RunRef, path: Path, info: CheckpointInfo, draft_config: str | None) -> None:
    st.markdown("**Preflight against a target**")
    servers = rt.fleet.names()
    lock = control_lock(rt)  # a folder typed here is read only for a session that may act
    with st.container(horizontal=True, vertical_alignment="bottom"):
        how = st.segmented_control("Target", [MANAGED, FOLDER], default=MANAGED if servers else FOLDER,
                                   key="train-pf-how", persist_state="session") or FOLDER
        server_cfg = None
        target = None
        if how == MANAGED:
            if not servers:
                st.caption("No server in the workspace: give a folder instead.")
            else:
                shown = not data_lock(rt)  # the target's path: for sessions that may see the workspace's paths
                name = st.selectbox("Server", servers, key="train-pf-server",
                                    format_func=lambda n: f"{n} · {rt.fleet.config(n).model_path}" if shown else n, persist_state="session")
                server_cfg = rt.fleet.config(name)
                target = server_cfg.model_path
        else:
            target = st.text_input("Target model folder", key="train-pf-folder",
                                   value="" if data_lock(rt) else ref.target or "",
                                   placeholder="/models/Llama-3.1-8B-Instruct", disabled=bool(lock),
                                   help=lock or None, persist_state="session") or None
        typed = server_cfg is None
        run = st.button("Run preflight", key="train-pf-run", icon=":material/fact_check:",
                        disabled=not target or (typed and bool(lock)), help=(lock if typed else "") or None)
    key = f"train-pf-result-{path}"
    if run and target:
        folder = target if server_cfg is not None else typed_path(rt, target)  # nothing read before it is allowed
        if folder is not None:
            found = preflight_checkpoint(path, folder, server=server_cfg, draft_config=draft_config)
            st.session_state[key] = (time.time(), str(target), server_cfg.name if server_cfg else None, found)
    if key not in st.session_state:
        st.caption("Checks the fc width (aux layers × the target's hidden size), the vocab and its d2t/t2d "
                   "mapping, the architecture and the draft settings, as the Servers page does.")
        return
    at, tgt, srv, findings = st.session_state[key]
    errs = sum(f.severity == "error" for f in findings)
    warns = sum(f.severity == "warning" for f in findings)
    where = (f"server **{srv}**'s target" + ("" if data_lock(rt) else f" {code_span(tgt)}")) if srv else code_span(tgt)
    (st.error if errs else st.warning if warns else st.success)(
        fmt.data_markdown(f"Preflight of {code_span(path.name)} against {where}: {errs} error(s), {warns} warning(s)"))
    st.caption(f"checked {fmt.age(time.time() - at)}")
    findings_list(findings)
