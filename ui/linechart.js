// Specdeck's line charts: a plotly figure's JSON (scatter traces, the layout's titles, axis types and
// ranges, vertical lines with their labels) drawn by uPlot on a canvas.  uPlot (51 KB, served by the
// dashboard at app/static/uplot/) is loaded once per browser tab; plotly's own code is 4.7 MB.
const UPLOT = "app/static/uplot/uPlot.iife.min.js";
const DASHES = { solid: [], dash: [8, 5], dot: [2, 3], dashdot: [8, 3, 2, 3], longdash: [14, 5],
                 longdashdot: [14, 4, 2, 4] };
const TYPED = { f8: Float64Array, f4: Float32Array, i4: Int32Array, u4: Uint32Array, i2: Int16Array,
                u2: Uint16Array, i1: Int8Array, u1: Uint8Array };

function loadUPlot() {
  if (!window.specdeckUPlot) {
    window.specdeckUPlot = new Promise((resolve, reject) => {
      const s = document.createElement("script");
      s.src = new URL(UPLOT, document.baseURI).href;
      s.onload = () => resolve(window.uPlot);
      s.onerror = () => { window.specdeckUPlot = null; reject(new Error(`could not load ${s.src}`)); };
      document.head.appendChild(s);
    });
  }
  return window.specdeckUPlot;
}

// plotly writes numpy arrays as {dtype, bdata} (base64): a plain array, NaN as null
function values(v) {
  if (v == null) return [];
  if (Array.isArray(v)) return v;
  if (v.bdata !== undefined) {
    const raw = atob(v.bdata);
    const bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    const arr = Array.from(new (TYPED[v.dtype] || Float64Array)(bytes.buffer));
    return arr.map(x => (Number.isNaN(x) ? null : x));
  }
  return [];
}

// a date string as plotly writes one (local time, no zone) -> seconds, read as UTC and shown as UTC: the
// chart shows the times the server wrote, as plotly does
function seconds(v) {
  if (typeof v === "number") return v;
  const t = Date.parse(String(v).replace(" ", "T") + (/[zZ]|[+-]\d\d:?\d\d$/.test(v) ? "" : "Z"));
  return Number.isNaN(t) ? null : t / 1000;
}

// steps are whole: ticks 1, 2, 5, 10, 20, 50, ... apart
const STEPS = [];
for (let e = 0; e < 10; e++) for (const m of [1, 2, 5]) STEPS.push(m * 10 ** e);

// time ticks a whole second or more apart (a log read every second has nothing finer)
const TIMES = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
               172800, 604800, 2592000, 31536000];

function tick(v) {
  if (v == null) return "";
  const a = Math.abs(v);
  return a >= 1e5 || (a > 0 && a < 1e-3) ? v.toExponential(1) : Number(v.toPrecision(4)).toLocaleString();
}

function decimals(template, fallback) {
  // plotly's number formats as the pages write them: ".3f", ",.1f" (thousands separated), ".2e", "," (a
  // whole count, separated)
  const m = /%\{y:(,?)(?:\.(\d+)([fe]))?\}/.exec(template || "");
  if (!m || (!m[1] && !m[2])) return fallback;
  return [m[2] ? Number(m[2]) : 0, m[3] || "f", m[1] === ","];
}

function fmt(v, [digits, kind, grouped]) {
  if (v == null || Number.isNaN(v)) return "–";
  if (kind === "e") return v.toExponential(digits);
  return grouped ? v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits })
    : v.toFixed(digits);
}

function alpha(colour, opacity) {
  if (opacity == null || opacity >= 1 || !/^#[0-9a-f]{6}$/i.test(colour)) return colour;
  return colour + Math.round(opacity * 255).toString(16).padStart(2, "0");
}

function build(spec, uPlot) {
  const layout = spec.layout || {};
  const traces = (spec.data || []).filter(t => !t.type || ["scatter", "scattergl", "bar"].includes(t.type));
  // bars over categories (a histogram's bins, named by their text): each category at its index
  const barTrace = traces.find(t => t.type === "bar");
  const cats = barTrace ? values(barTrace.x).map(String) : null;
  const isTime = !cats && ((layout.xaxis || {}).type === "date" ||
    traces.some(t => Array.isArray(t.x) && typeof t.x[0] === "string"));
  const catAt = cats ? new Map(cats.map((c, i) => [c, i])) : null;
  const xs = traces.map(t => values(t.x).map(v => (cats ? catAt.get(String(v)) ?? null : isTime ? seconds(v) : v)));
  const ys = traces.map(t => values(t.y));
  // one x for every series (uPlot's shape): the union, each series undefined where it has no point (the line
  // runs on), null where its value is missing (a gap)
  const all = [...new Set(xs.flat().filter(v => v != null))].sort((a, b) => a - b);
  const at = new Map(all.map((v, i) => [v, i]));
  const data = [all];
  traces.forEach((t, k) => {
    const col = new Array(all.length);
    xs[k].forEach((x, i) => { if (x != null && i < ys[k].length) col[at.get(x)] = ys[k][i]; });
    data.push(col);
  });
  const yaxis = layout.yaxis || {};
  const log = yaxis.type === "log";
  let range = Array.isArray(yaxis.range) && yaxis.autorange === false || Array.isArray(yaxis.range) && !log
    ? yaxis.range.slice() : null;
  if (range && log) range = range.map(v => Math.pow(10, v));
  if (range && !(range[1] > range[0])) range = null;  // no width: the data's own range
  const series = [{ label: isTime ? "time" : ((layout.xaxis || {}).title || {}).text || "x",
                    value: cats ? (u, v) => (v == null ? "–" : cats[Math.round(v)] ?? "")
                      : isTime ? (u, v) => (v == null ? "–" : new Date(v * 1000).toISOString().slice(0, 19)
                      .replace("T", " ")) : (u, v) => (v == null ? "–" : Number(v).toLocaleString()) }];
  const gap = layout.bargap ?? 0.2;
  traces.forEach(t => {
    const line = t.line || {};
    const marker = t.marker || {};
    const mode = t.mode || "lines";
    const colour = alpha(line.color || marker.color || "#2563eb", t.opacity);
    const lines = mode.includes("lines");
    const markers = mode.includes("markers");
    const digits = decimals(t.hovertemplate, [3, "f", false]);
    if (t.type === "bar") {
      series.push({
        label: t.name || ((layout.yaxis || {}).title || {}).text || "",
        stroke: colour, fill: colour, width: 0,
        paths: uPlot.paths.bars({ size: [1 - gap, Infinity] }),
        points: { show: false },
        show: t.visible !== "legendonly",
        value: (u, v) => fmt(v, digits),
        legendHidden: t.showlegend === false,
      });
      return;
    }
    series.push({
      label: t.name || "",
      stroke: colour,
      width: lines ? (line.width || 2) : 0,
      dash: DASHES[line.dash] || [],
      spanGaps: t.connectgaps === true,
      paths: lines ? undefined : () => null,
      points: markers ? { show: true, size: Math.max(4, (marker.size || 6)), fill: marker.color || colour,
                          stroke: "#111827", width: 1 } : { show: false },
      show: t.visible !== "legendonly",
      value: (u, v) => fmt(v, digits),
      legendHidden: t.showlegend === false || t.hoverinfo === "skip",
    });
  });
  return { data, series, isTime, log, range, layout, cats };
}

const SECONDS = { second: 1, minute: 60, hour: 3600, day: 86400 };

function ranges(layout) {
  const buttons = (((layout.xaxis || {}).rangeselector || {}).buttons) || [];
  return buttons.map(b => [b.label || b.step, b.step === "all" ? 0 : (b.count || 1) * (SECONDS[b.step] || 0)])
    .filter(([, span], i, all) => span > 0 || buttons[i].step === "all");
}

function marks(layout) {
  // plotly's straight lines: vertical (add_vline, mark_restarts: a shape from x to x over the plot's height)
  // and horizontal (add_hline, a baseline: from y to y across the plot), each with the label placed at it
  const notes = (layout.annotations || []).filter(a => a.text);
  const lines = (layout.shapes || []).filter(s => s.type === "line");
  const style = s => ({ colour: (s.line || {}).color || "#9333ea", dash: DASHES[(s.line || {}).dash] || [2, 3],
                        width: (s.line || {}).width || 1 });
  const label = text => String(text || "").replace(/<[^>]*>/g, "");
  const vertical = lines.filter(s => s.x0 === s.x1 && s.x0 != null).map(s => ({
    ...style(s), x: s.x0, text: label((notes.find(a => a.x === s.x0 && (a.yref || "").match(/paper|domain/)) || {}).text),
  }));
  const horizontal = lines.filter(s => s.y0 === s.y1 && s.y0 != null && s.x0 !== s.x1).map(s => {
    const note = notes.find(a => a.y === s.y0 && (a.xref || "").match(/paper|domain/)) || {};
    return { ...style(s), y: s.y0, text: label(note.text), above: (note.yanchor || "bottom") === "bottom" };
  });
  return { vertical, horizontal };
}

// plotly's subplots (make_subplots, set_subplots): a panel per y axis, the top one first, each with its own
// traces, y axis, x axis and lines; a figure of one plot is one panel.  A panel's share of the height is its
// y axis' domain.
function panels(spec) {
  const layout = spec.layout || {};
  const traces = spec.data || [];
  const ids = [...new Set(traces.map(t => t.yaxis || "y"))];
  if (ids.length <= 1) return [{ spec, share: 1 }];
  const axis = id => layout["yaxis" + id.slice(1)] || {};
  const domain = id => axis(id).domain || [0, 1];
  ids.sort((a, b) => domain(b)[1] - domain(a)[1]);
  const size = id => Math.max(0.05, domain(id)[1] - domain(id)[0]);
  const total = ids.reduce((sum, id) => sum + size(id), 0);
  const ref = r => String(r || "").split(" ")[0];
  return ids.map((id, i) => {
    const mine = traces.filter(t => (t.yaxis || "y") === id);
    const xkey = "xaxis" + ((mine[0] || {}).xaxis || "x").slice(1);
    // a line drawn on this panel (add_vline/add_hline give each panel its own), or across the figure;
    // a label placed on the figure (yref "paper") goes on the top panel
    const shapes = (layout.shapes || []).filter(s => ref(s.yref) === id || ref(s.yref) === "paper");
    const annotations = (layout.annotations || []).filter(a => ref(a.yref) === id || (i === 0 && ref(a.yref) === "paper"));
    const { rangeselector } = layout.xaxis || {};
    return {
      share: size(id) / total,
      spec: {
        data: mine,
        layout: { ...layout, title: i === 0 ? layout.title : undefined, shapes, annotations,
                  xaxis: { ...(layout.xaxis || {}), ...(layout[xkey] || {}), rangeselector },
                  yaxis: axis(id) },
      },
    };
  });
}

// the panels of one figure on one x: the union of their points, each panel's series undefined where it has
// none (the line runs on), so that every panel spans the same range and the cursor is at the same x in each
function shareX(builds) {
  if (builds.length < 2) return;
  const all = [...new Set(builds.flatMap(b => b.data[0]))].sort((a, b) => a - b);
  const at = new Map(all.map((v, i) => [v, i]));
  builds.forEach(b => {
    const xs = b.data[0];
    b.data = [all, ...b.data.slice(1).map(col => {
      const out = new Array(all.length);
      xs.forEach((x, i) => { out[at.get(x)] = col[i]; });
      return out;
    })];
  });
}

let drawings = 0;

// what a chart is drawn as, its points aside: a redraw with the same is new points on the same chart
function signature(spec, heights) {
  const { shapes, annotations, ...layout } = spec.layout || {};
  const traces = (spec.data || []).map(({ x, y, ...rest }) => (rest.type === "bar" ? { ...rest, x } : rest));
  return JSON.stringify([layout, traces, heights]);
}

// The x range a user chose, kept on the box across the redraws of a live chart (every second or two): all of
// it (the default, and a double click), the newest span of a range button (it follows the new points) or a
// window dragged across (it stays where it was put).
function viewOf(box) {
  return box.specdeckView || { kind: "all" };
}

// the view kept for points ``xs``: a dragged window with none of it left (another run) gives the whole x axis
function keptView(box, xs) {
  const view = viewOf(box);
  if (view.kind === "fixed" && xs.length && (view.max < xs[0] || view.min > xs[xs.length - 1])) {
    box.specdeckView = null;
  }
  return viewOf(box);
}

// ``plot``'s x range set to the kept view; ``whole``: the whole x axis set too (the "all" button), where
// otherwise uPlot's own range stands
function applyView(box, plot, whole = false) {
  const xs = plot.data[0];
  if (!xs.length) return;
  const view = keptView(box, xs);
  const lo = xs[0];
  const hi = xs[xs.length - 1];
  if (view.kind === "all") {
    if (whole) plot.setScale("x", { min: lo, max: hi });
    return;
  }
  plot.setScale("x", view.kind === "span" ? { min: Math.max(lo, hi - view.span), max: hi }
    : { min: view.min, max: view.max });
}

// what the x axis counts (time, steps, bins): a view chosen on one axis means nothing on another
function xKind(b) {
  return JSON.stringify([b.isTime, ((b.layout.xaxis || {}).title || {}).text || "", b.cats]);
}

// what is drawn, for a look from outside (the tests, perf/): the points on the x axis, the last x with a value
function describe(box, parts, plots) {
  let last = null;
  let drawn = 0;
  parts.forEach(({ b }) => {
    drawn = Math.max(drawn, b.data[0].length);
    for (let k = 1; k < b.data.length; k++) {
      const col = b.data[k];
      for (let i = col.length - 1; i >= 0; i--) {
        if (col[i] != null) { if (last === null || b.data[0][i] > last) last = b.data[0][i]; break; }
      }
    }
  });
  box.dataset.last = last === null ? "" : String(last);
  box.dataset.drawn = String(drawn);
  box.dataset.panels = String(plots.length);
  box.dataset.scale = parts[0].b.log ? "log" : "linear";
  box.dataset.view = viewOf(box).kind;
  box.dataset.redraws = String(Number(box.dataset.redraws || 0) + 1);
}

export default function (component) {
  const { data, parentElement } = component;
  let box = parentElement.querySelector(".sd-chart");
  if (!box) {
    box = document.createElement("div");
    box.className = "sd-chart";
    parentElement.appendChild(box);
  }
  // the figure's JSON, sent as bytes
  const text = typeof data === "string" ? data : new TextDecoder().decode(
    data instanceof ArrayBuffer ? new Uint8Array(data) : data);
  const spec = JSON.parse(text);
  const height = (spec.layout || {}).height || 300;
  // each drawing owns the box until a newer one (a page run with new data) or the unmount lets it go
  const token = {};
  box.specdeckToken = token;
  clearTimeout(box.specdeckRelease);  // a redraw: the chart is kept for it
  const title = ((spec.layout || {}).title || {}).text || "";
  box.dataset.title = title;
  loadUPlot().then(uPlot => {
    if (box.specdeckToken !== token) return;
    const parts = panels(spec).map(p => ({ ...p, b: build(p.spec, uPlot) }));
    shareX(parts.map(p => p.b));
    const heights = parts.map(p => Math.max(100, Math.round((height - 60) * p.share)));
    const sig = signature(spec, heights);
    const old = box.specdeckChart;
    if (old && old.signature === sig) {
      // the same chart with new points: drawn in place, the x range the user chose kept
      const view = keptView(box, parts[0].b.data[0]);
      old.state.quiet = true;
      parts.forEach((p, i) => {
        old.state.lines[i] = marks(p.b.layout);
        old.plots[i].setData(p.b.data, view.kind === "all");
      });
      applyView(box, old.plots[0]);
      old.state.quiet = false;
      describe(box, parts, old.plots);
      return;
    }
    release(box);
    box.replaceChildren();
    const first = parts[0].b;
    if (box.specdeckXKind !== xKind(first)) box.specdeckView = null;  // another x axis: the whole of it
    box.specdeckXKind = xKind(first);
    const buttons = first.isTime ? ranges(first.layout) : [];
    let bar = null;
    if (buttons.length) {  // plotly's range buttons (15 m, 1 h, …, all): the newest span of the x axis
      bar = document.createElement("div");
      bar.className = "sd-ranges";
      box.appendChild(bar);
    }
    // panels share the x axis: a zoom, a range button or the cursor on one moves them all
    const sync = `sd-chart-${++drawings}`;
    let syncing = false;
    const plots = [];
    // quiet: the x range is being set by a redraw or a button, not by the user's drag or double click
    const state = { lines: parts.map(p => marks(p.b.layout)), quiet: true };
    parts.forEach((p, i) => {
      const plot = new uPlot(options(uPlot, p.b, {
        title: i === 0 ? title : "",
        width: Math.max(200, box.clientWidth || parentElement.clientWidth || 600),
        height: heights[i],
        sync: parts.length > 1 ? sync : null,
        lines: () => state.lines[i],
        onScale: u => {
          if (i === 0) box.dataset.xrange = `${u.scales.x.min},${u.scales.x.max}`;
          if (!state.quiet && u.data[0].length) {  // the user's drag (a window) or double click (all of it)
            const xs = u.data[0];
            const all = u.scales.x.min <= xs[0] && u.scales.x.max >= xs[xs.length - 1];
            box.specdeckView = all ? { kind: "all" } : { kind: "fixed", min: u.scales.x.min, max: u.scales.x.max };
            box.dataset.view = box.specdeckView.kind;
          }
          if (syncing) return;
          syncing = true;
          plots.forEach(o => { if (o !== u) o.setScale("x", { min: u.scales.x.min, max: u.scales.x.max }); });
          syncing = false;
        },
      }), p.b.data, box);
      plots.push(plot);
      // the legend lists what has a name: the faint raw values under a smoothed line are not listed
      p.b.series.forEach((s, k) => {
        if (k > 0 && s.legendHidden) {
          const row = plot.root.querySelectorAll(".u-legend .u-series")[k];
          if (row) row.style.display = "none";
        }
      });
      if ((p.b.layout.showlegend === false || p.b.cats) && p.b.series.length === 2) plot.root.classList.add("sd-one");
    });
    buttons.forEach(([label, span]) => {
      const btn = document.createElement("button");
      btn.type = "button";
      btn.textContent = label;
      btn.onclick = () => {
        box.specdeckView = span ? { kind: "span", span } : { kind: "all" };
        box.dataset.view = box.specdeckView.kind;
        state.quiet = true;
        applyView(box, plots[0], true);
        state.quiet = false;
      };
      bar.appendChild(btn);
    });
    applyView(box, plots[0]);  // the range the user chose before the chart changed
    state.quiet = false;
    describe(box, parts, plots);
    const observer = new ResizeObserver(() => {
      const w = box.clientWidth;
      plots.forEach((plot, i) => {
        if (w > 0 && Math.abs(w - plot.width) > 2) plot.setSize({ width: w, height: heights[i] });
      });
    });
    observer.observe(box);
    box.specdeckChart = { plots, observer, state, signature: sig };
    window.specdeckCharts = (window.specdeckCharts || 0) + 1;
  }).catch(err => {
    if (box.specdeckToken !== token) return;
    box.textContent = `${title}: the chart could not be drawn (${err.message})`;
  });
  return () => {
    if (box.specdeckToken !== token) return;  // a newer drawing owns the box
    // unmounted, or about to be drawn again with new points (which claims the box first and keeps the chart)
    box.specdeckRelease = setTimeout(() => {
      if (box.specdeckToken !== token) return;
      box.specdeckToken = null;
      release(box);
    }, RELEASE_MS);
  };
}

// how long an unmounted chart waits before it is destroyed: a redraw's new drawing comes within this
const RELEASE_MS = 250;

// uPlot's options for one panel ``b`` (what build() read of its figure)
function options(uPlot, b, { title, width, height, sync, onScale, lines: current }) {
  const timeX = b.isTime;
  const cats = b.cats;
  const yTitle = ((b.layout.yaxis || {}).title || {}).text || "";
  const xTitle = ((b.layout.xaxis || {}).title || {}).text || "";
  const yaxis = b.layout.yaxis || {};
  const fromZero = cats || yaxis.rangemode === "tozero";
  return {
    title,
    width,
    height,
    tzDate: ts => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
    scales: {
      x: cats ? { time: false, range: () => [-0.5, cats.length - 0.5] } : { time: timeX },
      y: b.log ? { distr: 3, ...(b.range ? { range: () => b.range } : {}) }
           : b.range ? { range: () => b.range }
           // a horizontal line (a baseline) is in view, as plotly's autorange keeps it; bars and an axis
           // asked to start at zero (rangemode "tozero") start there
           // (uPlot's own range, padded, with them; a redraw in place may bring a line the chart had not)
           : { range: (u, lo, hi) => {
               const ys = current().horizontal.map(m => m.y).filter(Number.isFinite);
               if (fromZero) ys.push(0);
               if (lo == null && !ys.length) return [0, 1];
               return uPlot.rangeNum(Math.min(lo ?? ys[0], ...ys), Math.max(hi ?? ys[0], ...ys), 0.1, true);
             } },
    },
    axes: [
      { label: timeX ? "" : xTitle, labelSize: 20, size: 40,
        ...(cats ? { incrs: STEPS, space: 64, values: (u, splits) => splits.map(v => cats[v] ?? "") }
          : xTitle === "step" ? { incrs: STEPS } : timeX ? { incrs: TIMES } : {}) },
      { label: yTitle, labelSize: 20, size: 60, values: (u, splits) => splits.map(tick) },
    ],
    series: b.series.map(({ legendHidden, ...s }) => s),
    legend: { live: true },
    // panels hovered together: the time under the cursor on each, no horizontal line at a height that means
    // nothing on the others
    cursor: { drag: { x: !cats, y: false }, ...(sync ? { sync: { key: sync }, y: false } : {}) },
    hooks: {
      // the x range shown (zoomed, a range button, all), for a look from outside (the tests); the panels
      // below follow it
      setScale: [(u, key) => { if (key === "x") onScale(u); }],
      draw: [u => {
        const lines = current();  // a redraw in place brings new lines (a restart, a new baseline)
        const ctx = u.ctx;
        const px = devicePixelRatio;
        const { left, top, width, height } = u.bbox;
        const stroke = (m, x0, y0, x1, y1) => {
          ctx.save();
          ctx.strokeStyle = m.colour;
          ctx.setLineDash(m.dash.map(d => d * px));
          ctx.lineWidth = m.width * px;
          ctx.beginPath();
          ctx.moveTo(x0, y0);
          ctx.lineTo(x1, y1);
          ctx.stroke();
          ctx.fillStyle = m.colour;
          ctx.font = `${10 * px}px sans-serif`;
          ctx.textAlign = "left";  // uPlot leaves its axes' alignment set
          ctx.textBaseline = "alphabetic";
          return ctx;
        };
        lines.vertical.forEach(m => {
          const x = Math.round(u.valToPos(timeX ? seconds(m.x) : m.x, "x", true));
          if (!Number.isFinite(x) || x < left || x > left + width) return;
          const c = stroke(m, x, top, x, top + height);
          if (m.text) c.fillText(m.text, x + 4 * px, top + 12 * px);
          c.restore();
        });
        lines.horizontal.forEach(m => {
          const y = Math.round(u.valToPos(m.y, "y", true));
          if (!Number.isFinite(y) || y < top || y > top + height) return;
          const c = stroke(m, left, y, left + width, y);
          if (m.text) c.fillText(m.text, left + 4 * px, m.above ? y - 4 * px : y + 12 * px);
          c.restore();
        });
      }],
    },
  };
}

// the chart drawn in ``box`` before, destroyed (uPlot's listeners go with it); ``window.specdeckCharts``
// counts the charts alive in the tab
function release(box) {
  const old = box.specdeckChart;
  if (!old) return;
  box.specdeckChart = null;
  old.observer.disconnect();
  old.plots.forEach(plot => plot.destroy());
  window.specdeckCharts -= 1;
}
