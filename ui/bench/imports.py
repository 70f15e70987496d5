"""The Benchmarks page's Import tab (files uploaded or a report pasted) and
the Runs tab's delete, both authorised and audited like every other action."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from backend.bench.intake import MAX_BYTES, FileOutcome, algorithm_choice, store_files, summary
from backend.bench.describe import describe
from specdeck_types.bench import BenchResult
from state.bench import BenchStore
from ui import fmt
from ui.auth import control_lock
from ui.components import confirm_box
from ui.context import actor

OUTCOMES = "bench-import-outcomes"
FORMATS = ("SGLang bench_serving's JSONL (any version) or the console report it prints (nohup.out and the like, "
           "several reports in one file are fine), vLLM bench serve's report or JSON, bench_one_batch_server's "
           "output, bench_speculative's JSONL, SpecForge's benchmark output, the results of SpecForge's benchmarks/ "
           "scripts (bench_eagle3.py's JSON, bench_model_speedup.py's JSONL, the 'token/s' output of its humaneval / "
           "mtbench runs), or a CSV of hand-entered numbers with an output_tok_s column. A paste quoted with '> ', "
           "'# ' or markdown fences is read")


def import_panel(rt) -> None:
    lock = control_lock(rt)
    st.caption(f"Store results from files: {FORMATS}. The format is recognised from the content; a line that "
               "cannot be read is skipped and named, the rest of the file is stored. The same file twice is "
               "stored once. From a shell: `python -m backend.cli bench import FILE...`.")
    with st.form("bench-import", border=True, clear_on_submit=True):
        files = st.file_uploader("Benchmark files", accept_multiple_files=True, key="bench-import-files",
                                 max_upload_size=MAX_BYTES >> 20,
                                 help="one or more files; they go to this dashboard's workspace, nowhere else")
        pasted = st.text_area("Or paste a report", key="bench-import-text", persist_state="session", height=160,
                              placeholder="============ Serving Benchmark Result ============\n"
                                          "Backend:                                 sglang\n...")
        c = st.columns(3)
        name = c[0].text_input("Name for the pasted text", key="bench-import-name", persist_state="session", placeholder="pasted report",
                               help="what the pasted results carry as their source file")
        server = c[1].text_input("Server", key="bench-import-server", persist_state="session", placeholder="as the files say",
                                 help="for results whose file does not name the server they ran against")
        algorithm = c[2].text_input("Speculation", key="bench-import-algorithm", persist_state="session", placeholder="as the files say",
                                    help="the speculation algorithm (EAGLE3, ...) or none for runs without it, for "
                                         "results whose file does not say; a run is paired with a baseline only "
                                         "when both say")
        go = st.form_submit_button("Import", type="primary", icon=":material/upload_file:", disabled=bool(lock),
                                   help=lock or "parse and store every result found")
    if go:
        blobs = [(f.name, f.getvalue(), "uploaded") for f in files or []]
        if pasted and pasted.strip():
            blobs.append((name.strip() or "pasted report", pasted.encode("utf-8"), "pasted"))
        try:
            chosen = algorithm_choice(algorithm)
        except ValueError as exc:
            st.error(f"Speculation: {exc}", icon=":material/error:")
            blobs, chosen = [], None
            go = False
        if go and not blobs:
            st.warning("Choose a file or paste a report first.", icon=":material/info:")
        elif blobs:
            _import(rt, blobs, server.strip() or None, chosen)
    outcomes = st.session_state.get(OUTCOMES)
    if outcomes:
        _show(outcomes)


def _import(rt, blobs: list[tuple[str, bytes, str]], server: str | None, algorithm: str | None = None) -> None:
    store = BenchStore(rt.store)
    done: list[FileOutcome] = []

    def work():
        done.extend(store_files(store, blobs, server=server, algorithm=algorithm))
        return all(o.error is None for o in done), summary(done)

    names = ", ".join(n for n, _, _ in blobs)
    try:
        rt.act("import", "benchmarks", work, actor=actor(), source="dashboard", detail=names)
    except Exception as exc:  # refused (read-only) or failed: the audit log has it
        st.error(f"Could not import: {exc}", icon=":material/error:")
        return
    st.session_state[OUTCOMES] = done
    st.rerun()  # the table, charts and key figures above were drawn before these results existed


def _show(outcomes: list[FileOutcome]) -> None:
    line = summary(outcomes)
    line = fmt.data_markdown(line)  # it names the files, as uploaded
    if all(o.ok for o in outcomes) and any(o.new for o in outcomes):
        st.success(line, icon=":material/check_circle:")
    elif any(o.new or o.existing for o in outcomes):
        st.warning(line, icon=":material/warning:")
    else:
        st.error(line, icon=":material/error:")
    rows = [{
        "file": o.given,
        "sha256": o.sha256,
        "format": ", ".join(o.formats) or fmt.NA,
        "new": ", ".join(f"#{i}" for i in o.new) or "none",
        "stored before": ", ".join(f"#{i}" for i in o.existing) or "none",
        "skipped": len(o.skipped),
    } for o in outcomes]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="bench-import-table",
                 column_config={"file": st.column_config.TextColumn(width="medium"),
                                "sha256": st.column_config.TextColumn(help="the start of the file's SHA-256: with "
                                "the name, the source the results carry (the same name with other bytes is "
                                "another file)"),
                                "skipped": st.column_config.NumberColumn(help="parts of the file that could not "
                                "be read; each is listed below with its line and field")})
    skipped = [s for o in outcomes for s in o.skipped]
    errors = [o.error for o in outcomes if o.error]
    for e in errors:
        st.error(fmt.data_markdown(e), icon=":material/error:")
    for n in [n for o in outcomes for n in o.notes][:20]:
        st.info(fmt.data_markdown(n), icon=":material/info:")
    if skipped:
        with st.expander(f"{fmt.count(len(skipped))} skipped part{'s' if len(skipped) != 1 else ''}: file, line, "
                         "field and why"):
            st.code("\n".join(skipped[:500]) + (f"\n… {len(skipped) - 500} more" if len(skipped) > 500 else ""),
                    language=None, wrap_lines=True)


def _label(r: BenchResult) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at or r.created_at or 0))
    return f"#{r.id} · {when} · {describe(r)}"


def delete_panel(rt, results: list[BenchResult]) -> None:
    """Delete stored results (a mistaken import, a run against the wrong server), after a confirmation."""
    lock = control_lock(rt)
    with st.expander("Delete results…"):
        by_id = {r.id: r for r in results}
        ids = st.multiselect("Results to delete", list(by_id), format_func=lambda i: _label(by_id[i]),
                             key="bench-delete-ids", placeholder="choose by id, server, configuration",
                             disabled=bool(lock))
        if st.button("Delete…", key="bench-delete", icon=":material/delete:", disabled=not ids or bool(lock),
                     help=lock or "asks first; a deleted result can be imported again from its file"):
            st.session_state["bench-confirm-delete"] = list(ids)
            st.session_state["bench-confirm-delete-box"] = True  # arms the question below
    pending = st.session_state.get("bench-confirm-delete")
    if not pending:
        return
    answer = confirm_box("bench-confirm-delete-box",
                         f"Delete {len(pending)} result{'s' if len(pending) != 1 else ''} "
                         f"({', '.join(f'#{i}' for i in pending)})? The charts and the baseline lookup stop "
                         "using them.", confirm_label="Yes, delete")
    if answer is None:
        return
    st.session_state.pop("bench-confirm-delete", None)
    if not answer:
        return
    store = BenchStore(rt.store)

    def work():
        gone = [i for i in pending if store.delete(int(i))]
        return len(gone) == len(pending), f"deleted {', '.join(f'#{i}' for i in gone) or 'nothing'}"

    try:
        ok, msg = rt.act("delete", "benchmarks", work, actor=actor(), source="dashboard",
                         detail=", ".join(f"#{i}" for i in pending))
    except Exception as exc:
        st.error(f"Could not delete: {exc}", icon=":material/error:")
        return
    st.session_state.pop("bench-delete-ids", None)
    st.toast(msg[0].upper() + msg[1:], icon=":material/check_circle:" if ok else ":material/warning:")
    st.rerun()
