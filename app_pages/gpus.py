"""GPUs: live GPU and host telemetry, who holds each GPU, history and alerts.

Reads only the background sampler's snapshots (``rt.telemetry``); never
calls NVML or psutil itself.
"""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from ui import charts, fmt, gpus_nodes
from ui.auth import control_lock, data_lock, live_fragment
from ui.components import freshness, page_header
from ui.context import actor, runtime
from ui.linechart import line_chart
from ui.overview_query import QueryState

REFRESH_S = 2
HISTORY_REFRESH_S = 5
SLOW_REFRESH_S = 5
PER_ROW = 4
NA = fmt.NA
GIB = 1024**3
RANGES = {"15 m": 900, "1 h": 3600, "6 h": 6 * 3600, "24 h": 86400, "7 d": 7 * 86400}
FIELDS = {
    "Utilisation (%)": ("util_gpu", ".0f", 1.0),
    "Memory used (GiB)": ("mem_used", ".1f", 1 / GIB),
    "Power (W)": ("power_w", ".0f", 1.0),
    "Temperature (°C)": ("temp_c", ".0f", 1.0),
    "SM clock (MHz)": ("sm_clock_mhz", ".0f", 1.0),
    "Memory controller busy (%)": ("util_mem", ".0f", 1.0),
}
# One colour per GPU, the same on every chart and never shared by two GPUs of
# one machine: 16 distinct colours, then evenly spread hues for larger hosts.
GPU_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
)
HOST_COLOURS = {"CPU %": "#1f77b4", "memory %": "#ff7f0e"}
# Eight GPU names beside the title overlap it at 1024 px: the legend goes under the chart.
LEGEND_BELOW = dict(legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0),
                    margin=dict(l=10, r=10, t=40, b=10))


def gpu_colour(index: int, count: int) -> str:
    """GPU ``index``'s line colour on a host of ``count`` GPUs."""
    if count <= len(GPU_PALETTE):
        return GPU_PALETTE[index % len(GPU_PALETTE)]
    hue = round(360 * index / count)
    return f"hsl({hue}, 65%, 45%)"


THROTTLE_LABELS = {
    "idle": "idle", "app_clocks": "application clocks", "sw_power_cap": "power cap",
    "hw_slowdown": "hardware slowdown", "sync_boost": "sync boost", "sw_thermal": "thermal (sw)",
    "hw_thermal": "thermal (hw)", "hw_power_brake": "power brake (hw)", "display_clocks": "display clocks",
}

rt = runtime()
sampler = getattr(rt, "telemetry", None)
prom = getattr(sampler, "prom", None)  # other nodes through Prometheus, when configured

page_header("GPUs", "Live GPU and host telemetry, which job holds each GPU, history and alerts; "
            "read from the dashboard's background sampler, never on page render"
            + (", this node first, then every node Prometheus reads." if prom is not None else "."))

if sampler is None:
    st.error("GPU telemetry is not running in this dashboard: the runtime has no sampler. "
             "Check the dashboard log for a start-up error.")
    st.stop()


# -- small formatting helpers (pure) ---------------------------------------


def _num(v: float | None, unit: str, digits: int = 0) -> str:
    return NA if v is None else f"{v:,.{digits}f}{unit}"


def _why(obj, field: str) -> str | None:
    na = getattr(obj, "na", None) or {}
    why = na.get(field)
    return f"N/A: {why}" if why else None


def _metric(col, label: str, obj, field: str, value: str, help_text: str | None = None,
            delta: str | None = None) -> None:
    """A metric; ``delta`` is a plain grey note under the value (such as the total)."""
    missing = getattr(obj, field, None) is None
    col.metric(label, NA if missing else value, help=(_why(obj, field) or "N/A: no reading") if missing else help_text,
               delta=None if missing else delta, delta_color="off", delta_arrow="off")


def _mb_s(bps: float | None) -> str:
    return NA if bps is None else f"{bps / 1e6:,.1f} MB/s"


def _kwh(joules: float | None) -> str:
    return NA if joules is None else f"{joules / 3.6e6:,.2f} kWh"


def _who(snap, index: int) -> str:
    attr = snap.attribution
    if attr is None:
        return "attribution pending"
    return attr.who(index)


# -- live part ---------------------------------------------------------------


def _state_banner(snap) -> None:
    st_ = snap.state
    if st_.status.value in ("no library", "driver not loaded"):
        st.warning(f"**No NVIDIA driver**: {st_.message}. GPU telemetry is off; host telemetry below "
                   "still works. On a GPU machine, install the NVIDIA driver and `nvidia-ml-py`; for a demo, "
                   "set `source = \"fake\"` under `[telemetry]` in the workspace file.", icon=":material/warning:")
    elif st_.status.value == "error":
        st.error(f"**NVML problem**: {st_.message}. Host telemetry below still works.", icon=":material/error:")
    elif st_.source == "fake":
        st.info(f"Simulated GPUs (fake NVML source): {st_.message}. Readings are plausible, not real.", icon=":material/info:")


def _key_figures(snap) -> None:
    gpus = snap.gpus
    alive = [g for g in gpus if not g.lost]
    utils = [g.util_gpu for g in alive if g.util_gpu is not None]
    used = [g.mem_used for g in alive if g.mem_used is not None]
    total = [g.mem_total for g in alive if g.mem_used is not None and g.mem_total]
    power = [g.power_w for g in alive if g.power_w is not None]
    limit = [g.power_limit_w for g in alive if g.power_w is not None and g.power_limit_w is not None]
    c = st.columns(3) + st.columns(3)  # two rows of three: every figure whole at 1024 px
    lost = len(gpus) - len(alive)
    counted = bool(gpus) or snap.state.ok
    c[0].metric("GPUs", f"{len(gpus)}" if counted else NA, delta=f"-{lost} GPU{'s' if lost > 1 else ''} lost" if lost else None,
                help=None if gpus else ("NVML reports no GPUs on this machine" if counted
                                        else f"N/A: {snap.state.message or 'no GPU reading'}"))
    c[1].metric("Mean utilisation", fmt.pct(sum(utils) / len(utils)) if utils else NA,
                help=None if utils else "N/A: no GPU reported utilisation")
    c[2].metric("GPU memory", fmt.gib(sum(used)) if used else NA,
                delta=f"of {fmt.gib(sum(total))}" if used and total else None, delta_color="off", delta_arrow="off",
                help=None if used else "N/A: no GPU reported memory")
    c[3].metric("Total power", f"{sum(power):,.0f} W" if power else NA,
                delta=f"of {sum(limit):,.0f} W" if power and limit else None, delta_color="off", delta_arrow="off",
                help=None if power else "N/A: no GPU reported power")
    hot = max((g for g in alive if g.temp_c is not None), key=lambda g: g.temp_c, default=None)
    c[4].metric("Hottest GPU", f"{hot.temp_c:.0f} °C" if hot else NA,
                delta=f"GPU {hot.index}" if hot else None, delta_color="off", delta_arrow="off",
                help=f"GPU {hot.index} ({hot.name or 'name N/A'}) is the hottest" if hot
                else "N/A: no GPU reported temperature")
    cost = snap.cost
    share = cost.cpu_share
    per_gpu = cost.nvml_per_gpu_us
    c[5].metric("Sampler cost", f"{per_gpu:,.0f} µs" if per_gpu is not None else
                (f"{cost.median_ms:.1f} ms" if cost.median_ms is not None else NA),
                delta="per GPU per sample" if per_gpu is not None else None, delta_color="off", delta_arrow="off",
                help=("Median time of the sampler's GPU pass per GPU (NVML calls and turning them into readings)"
                      + (f"; mean {cost.nvml_per_gpu_us_mean:,.0f} µs, counting the passes that also read the"
                         " GPU process list" if cost.nvml_per_gpu_us_mean is not None else "")
                      + (f"; {cost.median_ms:.2f} ms per whole sample" if cost.median_ms is not None else "")
                      + (f"; sampler CPU {share * 100:.2f}% of one core" if share is not None else "")))


def _alerts(snap) -> None:
    for a in snap.alerts:
        (st.error if a.severity == "error" else st.warning if a.severity == "warning" else st.info)(
            a.message, icon=":material/error:" if a.severity == "error" else ":material/warning:")
    for e in snap.errors:
        st.caption(f":orange[sampler: {e}]")


def _line(parts: list[tuple[str, object, str, str]]) -> None:
    """One tile line of ``(label, obj, field, text)`` parts; any N/A part puts
    its reason on the line's hover help."""
    shown, why = [], []
    for label, obj, field, text in parts:
        if getattr(obj, field, None) is None:
            shown.append(f"{label} **{NA}**")
            why.append(f"{label}: {(getattr(obj, 'na', None) or {}).get(field, 'no reading')}")
        else:
            shown.append(f"{label} **{text}**")
    st.markdown(" · ".join(shown), help=("N/A — " + "; ".join(why)) if why else None)


def _tile(g, who: str, remote: bool = False) -> None:
    """One GPU's tile; ``remote``: a GPU of another node (its clock limits are not read there)."""
    with st.container(border=True):
        name = (g.name or "GPU").replace("NVIDIA ", "")
        head = f"**GPU {g.index}** · {name}"
        if g.lost:
            st.markdown(f"{head} · :red[✕ LOST]", help=_why(g, "util_gpu"))
            st.caption(g.na.get("util_gpu", "GPU is lost"))
            return
        st.markdown(head, help=f"{g.uuid or 'uuid N/A'} · bus {g.bus_id or 'N/A'}")
        st.caption(f"Job: {who}")
        if g.util_gpu is None:
            _line([("Utilisation", g, "util_gpu", "")])
        else:
            st.progress(min(1.0, g.util_gpu / 100), text=f"Utilisation {fmt.pct(g.util_gpu)}")
        frac = g.mem_fraction
        if frac is None:
            _line([("Memory", g, "mem_used", "")])
        else:
            st.progress(min(1.0, frac), text=f"Memory {g.mem_used / GIB:,.1f} / {g.mem_total / GIB:,.1f} GiB")
        _line([("Power", g, "power_w", _num(g.power_w, " W")),
               ("limit", g, "power_limit_w", _num(g.power_limit_w, " W"))])
        _line([("Temp", g, "temp_c", _num(g.temp_c, " °C")),
               ("SM", g, "sm_clock_mhz", _num(g.sm_clock_mhz, " MHz")),
               ("Mem", g, "mem_clock_mhz", _num(g.mem_clock_mhz, " MHz"))])
        if g.throttle is None:
            if not remote:
                st.caption(f"Clock limits: {NA}", help=_why(g, "throttle"))
        else:
            active = [THROTTLE_LABELS.get(t, t) for t in g.throttle if t != "idle"]
            if active:
                st.caption(f":orange[Clocks limited: {', '.join(active)}]")
        for m in g.mig_devices:
            st.caption(f"MIG {m.mig_index} (GI {m.gpu_instance_id}): "
                       f"{fmt.gib(m.memory_used)} / {fmt.gib(m.memory_total)}")


def _tiles(snap) -> None:
    gpus = list(snap.gpus)
    for start in range(0, len(gpus), PER_ROW):
        cols = st.columns(PER_ROW)
        for col, g in zip(cols, gpus[start:start + PER_ROW]):
            with col:
                _tile(g, _who(snap, g.index))


def _processes(snap) -> None:
    attr = snap.attribution
    st.subheader("Who holds the GPUs")
    read = [g.processes_t for g in snap.gpus if g.processes_t is not None and not g.lost]
    every = getattr(getattr(sampler, "adapter", None), "procs_interval_s", None)
    if read:
        st.caption(f"GPU process list read {fmt.age(snap.t - min(read))}"
                   + (f" (read every {every:g} s; the other readings every {snap.interval_s:g} s)" if every else ""))
    if attr is None or not attr.holders:
        st.caption("No processes on any GPU." if snap.gpus else "No GPUs to report on.")
        return
    for j in attr.jobs:
        st.markdown(fmt.data_markdown(f"{fmt.state_text(j.state)} &nbsp; {j.summary}"))
    hidden = data_lock(rt)  # a command line may hold paths, prompts, tokens
    rows = []
    for h in sorted(attr.holders, key=lambda h: (h.gpu_index, h.pid)):
        rows.append({
            "GPU": h.gpu_index,
            "pid": h.pid,
            "job": h.job or "— not managed —",
            "kind": h.kind or "",
            "user": h.user or ("" if h.job else NA),
            "command": "(hidden)" if hidden and h.command else
            h.command or ("" if h.job else f"{NA} ({h.na})" if h.na else NA),
            # N/A where NVML cannot tell (no permission, some container setups), never 0
            "GPU memory": fmt.gib(h.used_memory),
        })
    df = pd.DataFrame(rows)
    if hidden:
        st.caption(f":material/lock: {hidden}")
    st.dataframe(df, hide_index=True, width="stretch",
                 column_config={"pid": st.column_config.NumberColumn(format="%d"),
                                "GPU memory": st.column_config.TextColumn(
                                    help="Memory this process holds on this GPU; N/A where NVML cannot read it")})
    st.download_button("Download GPU processes (CSV)", df.to_csv(index=False), "gpu_processes.csv",
                       mime="text/csv", key="gpu-proc-csv")


def _host(snap) -> None:
    h = snap.host
    st.subheader("Host")
    if h is None:
        st.caption(f"Host telemetry: {NA} (the last host reading failed; see the dashboard log)")
        return
    c = st.columns(3) + st.columns(2)  # two rows: every figure whole at 1024 px
    _metric(c[0], "CPU", h, "cpu_percent", fmt.pct(h.cpu_percent),
            help_text=f"{h.cpu_count} cores" if h.cpu_count else None)
    _metric(c[1], "Memory", h, "mem_used", fmt.gib(h.mem_used),
            help_text=f"{fmt.pct(h.mem_percent)} of {fmt.gib(h.mem_total)} in use",
            delta=f"of {fmt.gib(h.mem_total)}" if h.mem_total else None)
    _metric(c[2], "Load (1 m)", h, "load_1m", _num(h.load_1m, "", 2))
    _metric(c[3], "Network in", h, "net_rx_bps", _mb_s(h.net_rx_bps))
    _metric(c[4], "Network out", h, "net_tx_bps", _mb_s(h.net_tx_bps))
    if h.disks:  # a plain table: long volume paths wrap instead of pushing columns out of sight
        st.table(pd.DataFrame([{
            "volume": d.path,
            "used %": fmt.pct(d.percent) if d.percent is not None else f"{NA} ({d.na})",
            "free": fmt.gib(d.free),
            "used": fmt.gib(d.used),
            "size": fmt.gib(d.total),
        } for d in h.disks]).set_index("volume"))


def _prometheus() -> None:
    """The other nodes, read through Prometheus (``[telemetry.prometheus] url``), after this one."""
    problems = getattr(sampler, "prom_problems", None) or []
    for p in problems:
        st.error(f"Prometheus settings: {p}", icon=":material/error:")
    if prom is None:
        return
    psnap = prom.latest()
    st.subheader("Other nodes (through Prometheus)")
    if psnap is None:
        st.info(f"Waiting for the first read of {prom.url} (every {prom.interval_s:g} s).",
                icon=":material/hourglass_top:")
        return
    if psnap.error:
        st.warning(f"**Prometheus did not answer**: {psnap.error}. The nodes below are the last known, "
                   "their readings N/A with their age. Check that Prometheus runs at the workspace's "
                   "`[telemetry.prometheus] url`.", icon=":material/warning:")
    remote = psnap.remote
    cost = f" in {psnap.query_ms:,.0f} ms," if psnap.query_ms is not None else ""
    freshness(psnap.t, max(REFRESH_S, prom.interval_s), f"read from Prometheus at {prom.url}{cost}")
    if not remote:
        st.caption("Prometheus reports no other node's GPUs or servers. Add each node's DCGM exporter, "
                   "nvitop-exporter or Specdeck exporter (`[telemetry.prometheus] export`) to its scrape "
                   "targets.")
    for node in remote:
        gpus_nodes.draw_node(node, lambda g, who: _tile(g, who, remote=True), PER_ROW)
    holders = gpus_nodes.holder_rows(remote)
    if holders:
        st.markdown("**Who holds the other nodes' GPUs**",
                    help="From each node's exporter (pids and users from nvitop-exporter or Specdeck's "
                         "exporter, pods from DCGM exporter) and from the jobs known to run on a node's GPUs")
        st.dataframe(pd.DataFrame(holders), hide_index=True, width="stretch", key="gpu-remote-holders",
                     column_config={  # every column whole at 1024 px
                         "node": st.column_config.TextColumn(width="small"),
                         "GPU": st.column_config.NumberColumn(width="small"),
                         "pid": st.column_config.TextColumn(width="small"),
                         "job": st.column_config.TextColumn(width="medium"),
                         "user": st.column_config.TextColumn(width="small"),
                         "GPU memory": st.column_config.TextColumn(width="small"),
                         "found by": st.column_config.TextColumn(
                             width="small",
                             help="exporter: the node's exporter names the process or pod; pid: a pid of a job "
                                  "Specdeck runs on that node; placement: a job known to run on that node's GPU")})
        st.download_button("Download other nodes' GPU holders (CSV)", pd.DataFrame(holders).to_csv(index=False),
                           "gpu_holders_other_nodes.csv", mime="text/csv", key="gpu-remote-holders-csv")
    view = getattr(getattr(rt, "prom_targets", None), "latest", None)
    if view is not None:
        rows = gpus_nodes.target_rows(view)
        with st.expander(f"Scrape targets Specdeck writes and reads ({len(rows)})"):
            if not data_lock(rt):  # the files' paths, for a session that may see paths
                st.caption(f"Specdeck's file_sd file: `{view.path}`"
                           + (f" · Ray's: `{view.ray_path}`" if view.ray_path else " · no local Ray head"))
            if view.ray_error:
                st.error(view.ray_error, icon=":material/error:")
            if rows:
                st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", key="gpu-prom-targets")
            else:
                st.caption("No targets yet: a server that is running, or `[telemetry.prometheus] export`, adds one.")
    servers = gpus_nodes.server_rows(psnap.nodes)
    if servers:
        st.markdown("**SGLang servers through Prometheus**",
                    help="Each server's sglang: gauges as Prometheus last scraped them (rank 0 of a "
                         "tensor-parallel server; data-parallel ranks summed)")
        st.dataframe(pd.DataFrame(servers), hide_index=True, width="stretch", key="gpu-remote-servers")


@live_fragment(run_every=REFRESH_S)
def live() -> None:
    snap = sampler.latest()
    if prom is not None:
        st.subheader(f"This node · {prom.local_node}")
    if snap is None:
        st.info("Waiting for the first telemetry sample (the sampler reads every "
                f"{getattr(sampler, 'interval_s', 1):.0f} s).", icon=":material/hourglass_top:")
        freshness(None, REFRESH_S)
        return
    _state_banner(snap)
    _key_figures(snap)
    _alerts(snap)
    freshness(snap.t, max(REFRESH_S, snap.interval_s), "telemetry updated")
    _tiles(snap)
    _processes(snap)
    _host(snap)
    _prometheus()


live()


# -- slow readings: ECC, energy, NVLink, PCIe ------------------------------


def _slow_line(g, now: float) -> None:
    """One GPU's slow readings; N/A parts carry their reason on hover."""
    head = f"**GPU {g.index}**"
    sl = g.slow
    if g.lost:
        st.markdown(f"{head} · :red[✕ LOST] · ECC, energy, NVLink, PCIe **{NA}**",
                    help=f"N/A — {g.na.get('util_gpu', 'GPU is lost')}")
        return
    if sl is None:
        st.markdown(f"{head} · ECC, energy, NVLink, PCIe **{NA}**",
                    help="N/A — not read yet: the sampler's slow thread reads them shortly after start-up")
        return
    if "all" in sl.na:
        st.markdown(f"{head} · ECC, energy, NVLink, PCIe **{NA}**", help=f"N/A — {sl.na['all']}")
        return
    unc = sl.ecc_uncorrected_volatile
    unc_text = fmt.count(unc) if not unc else f":red[{fmt.count(unc)}]"
    links = (f"{sl.nvlink_active}/{sl.nvlink_total} active"
             if sl.nvlink_active is not None and sl.nvlink_total is not None else "")
    if sl.nvlink_total == 0:
        links = "no links"
    fields = [
        ("ECC corrected", "ecc_corrected_volatile", fmt.count(sl.ecc_corrected_volatile)),
        ("uncorrected", "ecc_uncorrected_volatile", unc_text),
        ("energy", "energy_j", _kwh(sl.energy_j)),
        ("NVLink", "nvlink_active", links),
    ]
    if sl.pcie_t is not None:
        fields += [("PCIe TX", "pcie_tx_bps", _mb_s(sl.pcie_tx_bps)), ("RX", "pcie_rx_bps", _mb_s(sl.pcie_rx_bps))]
    shown, why = [head], []
    for label, field, text in fields:
        if getattr(sl, field) is None:
            shown.append(f"{label} **{NA}**")
            why.append(f"{label}: {sl.na.get(field, 'no reading')}")
        else:
            shown.append(f"{label} **{text}**")
    if sl.pcie_t is None:
        shown.append(f"PCIe **{NA}**")
        why.append("PCIe: " + sl.na.get("pcie_tx_bps", "not read yet") + "; use “Read PCIe throughput now”")
    else:
        shown.append(f"PCIe read {fmt.age(now - sl.pcie_t)}")
    st.markdown(" · ".join(shown), help=("N/A — " + "; ".join(why)) if why else None)


@live_fragment(run_every=SLOW_REFRESH_S)
def slow_readings() -> None:
    slow_every = float(getattr(sampler, "slow_interval_s", 10.0))
    pcie_every = getattr(sampler, "pcie_interval_s", None)
    st.subheader("ECC, energy, NVLink and PCIe")
    st.caption(f"Read on the sampler's slow thread: ECC errors (volatile, since the driver was loaded), "
               f"energy since the driver was loaded and NVLink link states every {slow_every:.0f} s; PCIe "
               "throughput " + (f"every {fmt.duration(pcie_every)} and " if pcie_every else "")
               + "on demand, since each read holds the driver about 20 ms per counter per GPU.")
    snap = sampler.latest()
    lock = control_lock(rt)
    clicked = st.button("Read PCIe throughput now", key="gpu-pcie-read", icon=":material/speed:",
                        disabled=snap is None or not snap.gpus or bool(lock),
                        help=lock or "Asks the sampler's slow thread to read PCIe TX/RX of every GPU in the gap "
                                     "after its next pass; this page does not wait for it.")
    if clicked:
        try:
            rt.read_pcie(actor(), source="dashboard")
        except Exception as exc:  # refused: the audit log has it
            st.error(f"PCIe throughput was not read: {exc}", icon=":material/lock:")
    now = time.time()
    asked = getattr(sampler, "pcie_requested_at", None)
    if asked is not None:
        note = "" if getattr(sampler, "running", True) else \
            " The sampler is not running, so it will be read once the sampler starts."
        st.caption(f":material/hourglass_top: PCIe read requested {fmt.age(now - asked)}; the slow thread "
                   f"reads it after the next core pass and the figures below show when.{note}")
    if snap is None:
        st.caption("Waiting for the first telemetry sample.")
        freshness(None, slow_every, "slow readings updated")
        return
    if not snap.gpus:
        st.caption("No GPUs to report on." if snap.state.ok else f"{NA}: {snap.state.message}")
        return
    read = [g.slow.t for g in snap.gpus if g.slow is not None]
    freshness(max(read) if read else None, max(SLOW_REFRESH_S, slow_every), "slow readings updated")
    with st.container(border=True):
        for g in snap.gpus:
            _slow_line(g, now)


slow_readings()


# -- history -----------------------------------------------------------------

st.subheader("History")
THIS_NODE = "This node"
DEFAULT_RANGE = "15 m"
hist_node = THIS_NODE
# the history's node, time range and metric are in the URL's query (?node=NAME&range=1 h&metric=Power (W)): a
# view can be reloaded and shared; a value that is not one of the page's choices is ignored with a note
query = QueryState("gpus")
query.take("range", "gpu-hist-range", list(RANGES), what="time range")
query.take("metric", "gpu-hist-field", list(FIELDS), what="GPU metric")
if prom is not None:  # which node's history: this one, or one Prometheus reads
    psnap0 = prom.latest()
    node_options = [THIS_NODE] + [n.node for n in (psnap0.remote if psnap0 is not None else ()) if n.gpus]
    query.take("node", "gpu-hist-node", node_options, what="node")
    hist_node = st.columns([2, 3])[0].selectbox(
        "Node", node_options, key="gpu-hist-node",
        help="Other nodes' history is what this dashboard read from Prometheus since it started, every "
             f"{prom.interval_s:g} s")
    query.put("node", hist_node, default=THIS_NODE)
elif query.take("node", "gpu-hist-node", [THIS_NODE], what="node") is not None:
    query.put("node", None)  # this node is the only one: nothing to keep
query.show_notes()
if "gpu-hist-range" not in st.session_state:  # the default, set once: a link's range is never overridden by it
    st.session_state["gpu-hist-range"] = DEFAULT_RANGE
hc = st.columns([3, 2])  # room for all five range buttons at 1024 px
rng = hc[0].segmented_control("Time range", list(RANGES), key="gpu-hist-range")
field_label = hc[1].selectbox("GPU metric", list(FIELDS), key="gpu-hist-field")
query.put("range", rng, default=DEFAULT_RANGE)
query.put("metric", field_label, default=next(iter(FIELDS)))


def _remote_history(node_name: str, range_label: str, label: str) -> None:
    """One other node's GPU history, as this dashboard read it from Prometheus."""
    seconds = RANGES.get(range_label or "15 m", 900)
    field, fmt_spec, scale = FIELDS[label]
    since = time.time() - seconds
    psnap = prom.latest()
    node = next((n for n in (psnap.nodes if psnap is not None else ()) if n.node == node_name), None)
    if node is None or not node.gpus:
        st.caption(f"No GPU readings of node {node_name} in this dashboard's reads.")
        freshness(None, HISTORY_REFRESH_S, "history updated")
        return
    fig = charts.figure(f"{label} · node {node_name}", height=360, range_buttons=False, **LEGEND_BELOW)
    newest: list[float] = []
    for g in node.gpus:
        s = prom.history(node_name, g.index, field, since)
        if s.t:
            newest.append(s.t[-1])
        ys = [None if v is None else v * scale for v in s.value]
        charts.add_series(fig, f"GPU {g.index}", s.t, ys, fmt=fmt_spec, colour=gpu_colour(g.index, len(node.gpus)))
    if newest:
        line_chart(fig, key="gpu-remote-hist-chart")
    else:
        st.caption(f"No history of node {node_name} in the last {range_label or '15 m'} yet.")
    st.caption("Host figures of other nodes are not read through Prometheus.")
    freshness(max(newest) if newest else None, max(HISTORY_REFRESH_S, prom.interval_s), "history updated")


@live_fragment(run_every=HISTORY_REFRESH_S)
def history(range_label: str, label: str, node_name: str = THIS_NODE) -> None:
    if node_name != THIS_NODE and prom is not None:
        _remote_history(node_name, range_label, label)
        return
    seconds = RANGES.get(range_label or "15 m", 900)
    field, fmt_spec, scale = FIELDS[label]
    since = time.time() - seconds
    snap = sampler.latest()
    stale_after = max(HISTORY_REFRESH_S, getattr(sampler, "interval_s", 1.0))
    newest: list[float] = []  # the last reading of each trace: the block's real age
    if snap is None:
        st.caption("No history yet: waiting for the first telemetry sample.")
        freshness(None, stale_after, "history updated")
        return
    gpus = [g.index for g in snap.gpus]
    if gpus:
        fig = charts.figure(label, height=360, range_buttons=False, **LEGEND_BELOW)
        points = 0
        for i in gpus:
            s = sampler.history(i, field, since)
            ys = [None if v is None else v * scale for v in s.value]
            points += len(s.t)
            if s.t:
                newest.append(s.t[-1])
            charts.add_series(fig, f"GPU {i}", s.t, ys, fmt=fmt_spec, colour=gpu_colour(i, len(gpus)))
        if points:
            line_chart(fig, key="gpu-hist-chart")
        else:
            st.caption(f"No GPU history in the last {range_label or '15 m'} yet.")
    else:
        st.caption("No GPU history: no GPUs are reported.")
    fig = charts.figure("Host CPU and memory (%)", height=280, range_buttons=False, **LEGEND_BELOW)
    any_host = False
    for f, name in (("cpu_percent", "CPU %"), ("mem_percent", "memory %")):
        s = sampler.history(None, f, since)
        any_host = any_host or bool(s.t)
        if s.t:
            newest.append(s.t[-1])
        charts.add_series(fig, name, s.t, s.value, fmt=".0f", colour=HOST_COLOURS[name])
    if any_host:
        line_chart(fig, key="host-hist-chart")
    else:
        st.caption("No host history in this range yet (host readings have failed so far; see the dashboard log).")
    freshness(max(newest) if newest else None, stale_after, "history updated")


history(rng, field_label, hist_node)
