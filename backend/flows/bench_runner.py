"""Run one benchmark against a server and make one :class:`BenchResult` of it.

Where the server's own python has sglang (its serving environment), SGLang's benchmark runs
there: ``python -m sglang.benchmark.serving`` (0.5.23; ``sglang.bench_serving`` before) with
``--dataset-name random-ids``, the model folder's tokenizer, ``HF_HUB_OFFLINE=1`` and an
``--output-file`` whose JSONL record is then imported.  Elsewhere the built-in client
(:mod:`backend.bench.client`) offers the same load and measures the same figures.

Either way the accept length of the run is windowed: bench_serving's ``accept_length`` is
``/server_info``'s lifetime ``avg_spec_accept_length`` (warm-up and earlier traffic included),
so the runner marks the server before and after the run and takes

1. ``/metrics`` counters where the version has them (0.5.16+): the growth of
   ``generation_tokens_total`` over the growth of ``spec_verify_calls_total``, both counted per
   finished request as SGLang's own ``spec_accept_length = completion_tokens / spec_verify_ct``;
2. else the server log's decode lines written during the run (the bytes appended between the two
   marks), each line's ``accept len`` weighted by its ``#running-req``;

and keeps the lifetime value beside it.  The window holds the warm-up request (one, at the run's
lengths) as bench_serving's own run does.  The server's configuration comes from ``/server_info``
as it was when the run started.

Through a ``[[router]]`` the router's own ``/server_info`` and ``/metrics`` say nothing of what its servers
run, so each server behind it is marked before and after the run as above: the configuration is theirs
(``mixed``, never one server's, where their speculation differs) and the accept length is their windowed
figures weighted by the requests each took (``sglang:num_requests_total``), else None with the reason,
kept in the result's ``raw`` (:func:`router_accept_why`).

A benchmark is never measured across two server runs.  A workspace server's target carries a
probe of its supervised run (:func:`target_of`): the run's id and state are read when the
measurement starts and when it ends, and a result whose server was relaunched, restarted after a
crash or stopped in between is marked invalid with the reason (``BenchResult.invalid``), as is
one whose server's counters went back (a restart seen by the server's own ``/metrics``, where
there is no supervisor to ask).
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from backend.bench.client import DATASET, ClientRun, Load, run_load
from backend.bench.importers import BenchImportError, import_file
from backend.bench.importers_serving import config_from_server_info
from backend.flows.bench_serving import bench_serving_argv, run_bench_serving, serving_module
from backend.filemodes import make_private_dirs, write_private
from backend.readcap import CONFIG_JSON_MAX, load_json_capped
from backend.sglang.client import Metrics, ServerInfo, SglangClient
from backend.sglang.launch import endpoints
from backend.sglang.logparse import DecodeBatch, parse_line
from backend.supervisor.logtail import read_last
from specdeck_types.bench import RUN, BenchConfig, BenchFigures, BenchLoad, BenchResult, Percentiles

MODES = ("auto", "builtin", "sglang")
SGLANG_BACKENDS = ("sglang", "sglang-oai-chat")
TAIL_BYTES = 256 * 1024  # of bench_serving's log, for the lines an error quotes


class BenchRunError(Exception):
    """The benchmark could not run or gave no result; ``str(e)`` is for the user."""


@dataclass(frozen=True)
class Target:
    """The server to measure."""

    base_url: str
    name: str | None = None
    python: str | None = None  # the serving environment's interpreter
    log_path: Path | None = None
    model_path: str | None = None  # folder with the tokenizer (default: /model_info's tokenizer_path)
    api_key: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to the benchmark process's environment
    # the server's supervised run as it is now (None: not known); see :func:`run_probe`
    server_run: Callable[[], "ServerRun | None"] | None = field(default=None, compare=False, repr=False)
    # a router's servers (each a Target of its own): its configuration and accept length are theirs
    members: tuple["Target", ...] = ()


@dataclass(frozen=True)
class ServerRun:
    """One start of a managed server, as its supervisor shows it."""

    run_id: str | None
    state: str  # ProcState's value: RUNNING, STARTING, EXITED, ...


class UnknownServer(Exception):
    """The workspace has no server of the name asked for; ``str(e)`` is for the user."""


def _api_key(extra_args: list[str]) -> str | None:
    for i, a in enumerate(extra_args):
        if a == "--api-key" and i + 1 < len(extra_args):
            return extra_args[i + 1]
        if a.startswith("--api-key="):
            return a.split("=", 1)[1]
    return None


def target_of(session, name: str) -> Target:
    """The workspace server ``name`` as a benchmark target; ``session`` is anything with ``ws`` and
    ``fleet``, such as :class:`backend.cli.session.Session`."""
    routers = getattr(session.fleet, "router_names", list)()
    if name in routers:
        return _router_target(session, name)
    if name not in session.fleet.names():
        more = f" (routers: {', '.join(routers)})" if routers else ""
        raise UnknownServer(f"no server named {name!r} in {session.ws.config_path}{more}")
    return _server_target(session, name)


def _server_target(session, name: str) -> Target:
    cfg = session.fleet.config(name)
    caps = session.fleet.capabilities(name)
    return Target(base_url=endpoints(cfg, caps).base_url, name=name,
                  python=sys.executable if cfg.simulate else cfg.python,
                  log_path=session.fleet.log_path(name), model_path=cfg.model_path,
                  api_key=_api_key(list(cfg.extra_args)), server_run=run_probe(session, name))


def _router_target(session, name: str) -> Target:
    """A ``[[router]]`` as a benchmark target: requests go through it to the servers behind it, the
    tokenizer and the benchmark's interpreter are its first server's; the run that must not change while
    measuring is the router's own.  The servers behind it are its ``members``: the router's ``/server_info``
    does not say what they run, so the configuration and the accept length are read from them."""
    members = session.fleet.router_members(name)
    if not members:
        raise UnknownServer(f"router {name!r} of {session.ws.config_path} has no server behind it")
    first = session.fleet.config(members[0])
    return Target(base_url=session.fleet.router_config(name).url, name=name,
                  python=sys.executable if first.simulate else first.python, log_path=None,
                  model_path=first.model_path, api_key=_api_key(list(first.extra_args)),
                  server_run=run_probe(session, name),
                  members=tuple(_server_target(session, m) for m in members))


def run_probe(session, name: str) -> Callable[[], ServerRun | None]:
    """Reads the supervised run of server ``name`` (its id and state) from ``session``'s supervisor."""
    def probe() -> ServerRun | None:
        session.sup.poll()
        v = session.sup.view(name)
        return None if v is None else ServerRun(v.run_id, v.state.value)

    return probe


def _read_run(target: Target) -> ServerRun | None:
    if target.server_run is None:
        return None
    try:
        return target.server_run()
    except Exception:  # noqa: BLE001 - an unreadable supervisor must not end the measurement
        return None


def across_runs(name: str, before: ServerRun | None, after: ServerRun | None,
                mark_before: "Mark | None" = None, mark_after: "Mark | None" = None) -> str | None:
    """Why a measurement from ``before`` to ``after`` is not of one server run, or None when it is."""
    if before is not None and after is not None:
        if before.run_id != after.run_id:
            now = f"run {after.run_id}, {after.state}" if after.run_id else after.state
            return (f"{name} was restarted while it was measured (run {before.run_id} at the start, {now} at the "
                    "end): the figures mix two server runs")
        if after.state != "RUNNING":
            return f"{name} stopped while it was measured (run {after.run_id} is {after.state} at the end)"
    if mark_before is not None and mark_after is not None:
        for label, a, b in (("generated tokens", mark_before.gen_tokens, mark_after.gen_tokens),
                            ("verify calls", mark_before.verify_calls, mark_after.verify_calls)):
            if a is not None and b is not None and b < a:
                return (f"{name}'s {label} counter went back from {a:g} to {b:g} while it was measured: the "
                        "server restarted, and the figures mix two server runs")
    return None


# --------------------------------------------------------------------------------------
# Before and after: the accept length of this run only
# --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mark:
    at: float
    info: ServerInfo | None
    gen_tokens: float | None  # sglang:generation_tokens_total, summed over label sets
    verify_calls: float | None  # sglang:spec_verify_calls_total
    log_offset: int | None
    requests: float | None = None  # sglang:num_requests_total


def _counter(m: Metrics | None, name: str) -> float | None:
    if m is None:
        return None
    total = m.get(f"{name}_total", "sum")
    return total if total is not None else m.get(name, "sum")


def take_mark(client: SglangClient, log_path: Path | None) -> Mark:
    info = client.server_info()
    met = client.metrics()
    metrics = met.value if met.ok else None
    offset = None
    if log_path is not None:
        try:
            offset = os.stat(log_path).st_size
        except OSError:
            offset = None
    return Mark(time.time(), info.value if info.ok else None, _counter(metrics, "generation_tokens"),
                _counter(metrics, "spec_verify_calls"), offset, _counter(metrics, "num_requests"))


def accept_from_log(log_path: Path, start: int, end: int) -> float | None:
    """Mean accept length of the decode lines in bytes [start, end) of the log, each weighted by
    its running requests (a line's value is tokens / request-steps over its interval)."""
    num = den = 0.0
    try:
        with open(log_path, "rb") as fh:  # line by line: a long run's log need not fit in memory
            fh.seek(start)
            pos = start
            while pos < end:
                line = fh.readline(min(1 << 20, end - pos))
                if not line:
                    break
                pos += len(line)
                if b"ecode batch" not in line:
                    continue
                try:
                    rec = parse_line(line.decode("utf-8", "replace").rstrip("\r\n"))
                except ValueError:
                    continue
                if isinstance(rec, DecodeBatch) and rec.accept_len is not None:
                    w = float(rec.running_req or 1)
                    num += rec.accept_len * w
                    den += w
    except OSError:
        return None
    return num / den if den else None


def windowed_accept(before: Mark, after: Mark, log_path: Path | None) -> tuple[float | None, str | None]:
    """(accept length of the window, where it came from: "metrics" or "log"), or (None, None)."""
    if None not in (before.verify_calls, after.verify_calls, before.gen_tokens, after.gen_tokens):
        verify = after.verify_calls - before.verify_calls
        tokens = after.gen_tokens - before.gen_tokens
        if verify > 0 and tokens > 0:
            return tokens / verify, "metrics"
    if log_path is not None and before.log_offset is not None and after.log_offset is not None \
            and after.log_offset >= before.log_offset:
        value = accept_from_log(log_path, before.log_offset, after.log_offset)
        if value is not None:
            return value, "log"
    return None, None


# --------------------------------------------------------------------------------------
# The record
# --------------------------------------------------------------------------------------
def config_from_info(info: ServerInfo | None) -> BenchConfig:
    """The configuration part of the record from the ``/server_info`` read before the run."""
    return config_from_server_info(info.raw) if info is not None else BenchConfig()


def _pct(s: dict[str, Any], name: str) -> Percentiles:
    def g(key: str) -> float | None:
        v = s.get(key)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    return Percentiles(mean=g(f"mean_{name}_ms"), median=g(f"median_{name}_ms"), p90=g(f"p90_{name}_ms"),
                       p95=g(f"p95_{name}_ms"), p99=g(f"p99_{name}_ms"))


def result_from_client(run: ClientRun, target: Target, before: Mark) -> BenchResult:
    s = run.summary()
    load = run.load
    raw = {"tool": "specdeck-builtin", "backend": load.backend, "dataset_name": DATASET,
           "max_concurrency": load.concurrency, "num_prompts": load.num_prompts,
           "random_input_len": load.input_len, "random_output_len": load.output_len, **s}
    return BenchResult(
        source=RUN,
        config=config_from_info(before.info),
        load=BenchLoad(concurrency=load.concurrency, num_prompts=load.num_prompts, input_len=load.input_len,
                       output_len=load.output_len, dataset=DATASET, request_rate=math.inf),
        results=BenchFigures(
            output_tok_s=s["output_throughput"], total_tok_s=s["total_throughput"],
            request_s=s["request_throughput"], ttft_ms=_pct(s, "ttft"), tpot_ms=_pct(s, "tpot"),
            itl_ms=_pct(s, "itl"), e2e_ms=_pct(s, "e2e_latency"), completed=s["completed"],
            duration_s=s["duration"]),
        server=target.name, started_at=run.started_at, ended_at=run.ended_at,
        label="built-in client", raw=json.dumps(raw, sort_keys=True),
    )


def with_accept(result: BenchResult, before: Mark, after: Mark, log_path: Path | None) -> BenchResult:
    """``result`` with the run's windowed accept length and the server's lifetime one beside it."""
    windowed, source = windowed_accept(before, after, log_path)
    lifetime = result.results.accept_len_lifetime  # bench_serving's own reading, where it gave one
    if lifetime is None and after.info is not None:
        lifetime = after.info.avg_spec_accept_length
    if result.config.speculative is False:  # a baseline: nothing to accept
        windowed = lifetime = None
    label = result.label
    if source:
        label = f"{label}; accept length from the server's {source}" if label else \
            f"accept length from the server's {source}"
    return replace(result, results=replace(result.results, accept_len=windowed, accept_len_lifetime=lifetime),
                   label=label)


# --------------------------------------------------------------------------------------
# Through a router: the servers behind it
# --------------------------------------------------------------------------------------
MIXED = "mixed"  # the algorithm recorded when the servers behind a router are not configured alike
ROUTER_KEY = "specdeck_router"  # the key of the router's part in a result's ``raw`` JSON
_SPEC_FIELDS = ("algorithm", "draft_model", "num_steps", "topk", "num_draft_tokens")


def describe_config(c: BenchConfig) -> str:
    """A server's speculative configuration in a few words ("EAGLE3, draft D, 3 steps, topk 1, 4 draft tokens")."""
    if c.speculative is None:
        return "configuration not known"
    if c.speculative is False:
        return "no speculation"
    parts = [c.algorithm or ""]
    if c.draft_model:
        parts.append(f"draft {c.draft_model}")
    if c.num_steps is not None:
        parts.append(f"{c.num_steps} steps")
    if c.topk is not None:
        parts.append(f"topk {c.topk}")
    if c.num_draft_tokens is not None:
        parts.append(f"{c.num_draft_tokens} draft tokens")
    return ", ".join(parts)


def members_config(names: list[str], infos: list[ServerInfo | None]) -> tuple[BenchConfig, str]:
    """(the configuration of the servers behind a router, a line naming each one's) from their own
    ``/server_info``: theirs where they agree; where their speculation differs the algorithm is
    :data:`MIXED` (never one member's), and where one did not answer it is not known."""
    configs = [config_from_info(i) for i in infos]
    line = "; ".join(f"{n}: {describe_config(c) if i is not None else '/server_info did not answer'}"
                     for n, c, i in zip(names, configs, infos))
    if not configs:
        return BenchConfig(), line
    merged = {k: (getattr(configs[0], k) if all(getattr(c, k) == getattr(configs[0], k) for c in configs) else None)
              for k in BenchConfig.__dataclass_fields__}
    if any(i is None for i in infos):
        merged.update({k: None for k in _SPEC_FIELDS})
    elif any(getattr(c, k) != getattr(configs[0], k) for c in configs for k in _SPEC_FIELDS):
        merged.update({k: None for k in _SPEC_FIELDS})
        merged["algorithm"] = MIXED
    return BenchConfig(**merged), line


def members_accept(members: tuple[Target, ...], configs: list[BenchConfig], before: list[Mark],
                   after: list[Mark]) -> tuple[float | None, str | None, list[dict[str, Any]]]:
    """(the request-weighted accept length of a router's servers over the run, why it is None, each
    server's figures).  Each server's is windowed as for one server (:func:`windowed_accept`) and weighted
    by the growth of its ``sglang:num_requests_total``; a server that took no request adds nothing."""
    per: list[dict[str, Any]] = []
    missing: list[str] = []
    num = den = 0.0
    for m, c, b, a in zip(members, configs, before, after):
        value, source = windowed_accept(b, a, m.log_path)
        reqs = a.requests - b.requests if a.requests is not None and b.requests is not None else None
        per.append({"server": m.name, "accept_len": value, "source": source, "requests": reqs,
                    "configuration": describe_config(c)})
        if reqs is not None and reqs <= 0:
            continue
        if value is None:
            missing.append(f"{m.name} gave no accept length over the run (no speculative counters in its "
                           "/metrics and no decode lines in its log)")
        elif reqs is None:
            missing.append(f"{m.name}'s /metrics has no sglang:num_requests_total, so its share of the "
                           "requests is not known")
        else:
            num += value * reqs
            den += reqs
    if missing:
        return None, "; ".join(missing), per
    if not den:
        return None, "no server behind it counted a request over the run", per
    return num / den, None, per


def with_router(result: BenchResult, target: Target, before: list[Mark], after: list[Mark]) -> BenchResult:
    """``result`` measured through router ``target``: the configuration of the servers behind it, their
    request-weighted accept length over the run (or None with the reason, kept in ``raw`` under
    :data:`ROUTER_KEY`), and a restart of any of them marked invalid."""
    names = [m.name or m.base_url for m in target.members]
    config, line = members_config(names, [b.info for b in before])
    configs = [config_from_info(b.info) for b in before]
    if config.algorithm == MIXED:
        _, _, per = members_accept(target.members, configs, before, after)
        figures = ", ".join(f"{p['server']} {p['accept_len']:.2f}" for p in per if p["accept_len"] is not None)
        accept, why = None, ("the servers behind it run different speculation (" + line + "), so one accept "
                             "length would mix them" + (f"; each server's: {figures}" if figures else ""))
    elif config.speculative is False:
        accept, why, per = None, "its servers run without speculation", []
    else:
        accept, why, per = members_accept(target.members, configs, before, after)
        if config.speculative is None and accept is None:
            why = f"{why}; the configuration of its servers is not known ({line})" if why else \
                f"the configuration of its servers is not known ({line})"
    try:
        raw = json.loads(result.raw) if result.raw else {}
    except ValueError:
        raw = {"record": result.raw}
    if not isinstance(raw, dict):
        raw = {"record": raw}
    raw[ROUTER_KEY] = {"name": target.name, "servers": names, "configuration": line, "accept_len": accept,
                       "accept_len_why": why, "per_server": per}
    label = f"{result.label}; " if result.label else ""
    label += f"through router {target.name} to {', '.join(names)}"
    label += f" ({line})" if config.algorithm == MIXED or config.speculative is None else ", configured alike"
    if accept is not None:
        label += "; accept length of the servers behind it, weighted by their requests"
    invalid = result.invalid
    for m, b, a in zip(target.members, before, after):
        invalid = invalid or across_runs(m.name or m.base_url, None, None, b, a)
    return replace(result, config=config, label=label, raw=json.dumps(raw, sort_keys=True), invalid=invalid,
                   results=replace(result.results, accept_len=accept, accept_len_lifetime=None))


def router_accept_why(result: BenchResult) -> str | None:
    """Why a result measured through a router has no accept length, as the run recorded it; None when it
    was not measured through one (or recorded before the reason was kept)."""
    try:
        raw = json.loads(result.raw) if result.raw else None
    except ValueError:
        return None
    part = raw.get(ROUTER_KEY) if isinstance(raw, dict) else None
    if not isinstance(part, dict):
        return None
    why = part.get("accept_len_why")
    return why if isinstance(why, str) and why else None


def _member_marks(target: Target) -> list[Mark]:
    return [take_mark(SglangClient(m.base_url, timeout_s=10.0, api_key=m.api_key), m.log_path)
            for m in target.members]


# --------------------------------------------------------------------------------------
# SGLang's own benchmark, in the serving environment
# --------------------------------------------------------------------------------------
def _tokenizer_dir(client: SglangClient, target: Target) -> str | None:
    if target.model_path:
        return target.model_path
    status, body, _, _ = client._get(client.caps.model_info_path)
    if status == 404:
        other = "/model_info" if client.caps.model_info_path != "/model_info" else "/get_model_info"
        status, body, _, _ = client._get(other)
    try:
        return json.loads(body).get("tokenizer_path") if status == 200 and body else None
    except ValueError:
        return None


def import_bench_serving(path: Path) -> BenchResult:
    """The record bench_serving appended to its JSONL, through the benchmark importers."""
    try:
        parsed = import_file(path)
    except BenchImportError as exc:
        raise BenchRunError(f"bench_serving's output could not be read: {exc}") from None
    if parsed.problems or not parsed.results:
        why = "; ".join(str(q) for q in parsed.problems) or "no result in it"
        raise BenchRunError(f"bench_serving's output {path} could not be read: {why}")
    return parsed.results[-1]


# --------------------------------------------------------------------------------------
# One benchmark
# --------------------------------------------------------------------------------------
def run_benchmark(target: Target, load: Load, *, mode: str = "auto", work_dir: Path,
                  progress: Callable[[str, int, int], None] | None = None,
                  stop: threading.Event | None = None, client: SglangClient | None = None,
                  bench_timeout_s: float | None = None) -> BenchResult:
    """Measure ``target`` under ``load``.  ``mode``: ``auto`` (SGLang's benchmark where the serving
    environment has sglang, else the built-in client), ``builtin`` or ``sglang``.
    ``progress(phase, done, total)`` reports the phase and requests done."""
    if mode not in MODES:
        raise BenchRunError(f"mode {mode!r}: choose one of {', '.join(MODES)}")
    load.check()
    report = progress or (lambda phase, done, total: None)
    make_private_dirs(work_dir)
    client = client or SglangClient(target.base_url, timeout_s=10.0, api_key=target.api_key)
    module = None
    if mode in ("auto", "sglang"):
        report("checking the serving environment", 0, load.num_prompts)
        module = serving_module(target.python)
        if module is None and mode == "sglang":
            raise BenchRunError(f"{target.python or 'no python'}: the serving environment has no sglang, "
                                "so SGLang's benchmark cannot run there (use the built-in client)")
    if module is not None and load.backend not in SGLANG_BACKENDS:
        raise BenchRunError(f"backend {load.backend!r}: use one of {', '.join(SGLANG_BACKENDS)}")

    health = client.health()
    if not health.ok:
        raise BenchRunError(f"{target.base_url} is not ready ({health.error or health.status}); "
                            "start the server, or wait until it is RUNNING")
    run_before = _read_run(target)
    before = take_mark(client, target.log_path)
    members_before = _member_marks(target)
    if before.info is None and not target.members:
        raise BenchRunError(f"{target.base_url}: /server_info did not answer; the server's configuration "
                            "is needed for the record")
    report("running", 0, load.num_prompts)

    if module is None:
        vocab = _vocab_size(target, client)
        run = run_load(target.base_url, load, api_key=target.api_key, vocab_size=vocab,
                       progress=lambda d, t: report("running", d, t), stop=stop)
        after = take_mark(client, target.log_path)
        members_after = _member_marks(target)
        if run.errors():
            write_private(work_dir / "failed-requests.txt", "".join(f"{e}\n" for e in run.errors()))
        result = result_from_client(run, target, before)
    else:
        out_file = work_dir / "bench_serving.jsonl"
        argv = bench_serving_argv(str(target.python), module, target.base_url, load,
                                  _tokenizer_dir(client, target), out_file)
        env = dict(os.environ)
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
        env.update(target.env)
        if target.api_key:
            env["OPENAI_API_KEY"] = target.api_key
        started = time.time()
        rc = run_bench_serving(argv, env, cwd=work_dir, log_file=work_dir / "bench_serving.log",
                               progress=lambda d, t: report("running", d, t), stop=stop,
                               timeout_s=bench_timeout_s)
        ended = time.time()
        after = take_mark(client, target.log_path)
        members_after = _member_marks(target)
        if stop is not None and stop.is_set():
            raise BenchRunError("stopped before bench_serving finished")
        if rc != 0 or not out_file.exists():
            tail = _tail(work_dir / "bench_serving.log")
            raise BenchRunError(f"bench_serving exited with status {rc}; the end of "
                                f"{work_dir / 'bench_serving.log'}:\n{tail}")
        imported = import_bench_serving(out_file)
        result = replace(imported, source=RUN, server=target.name, started_at=started, ended_at=ended,
                         source_file=None, source_line=None,
                         config=_merge_config(imported.config, config_from_info(before.info)),
                         label=f"SGLang {module}")
    report("storing", load.num_prompts, load.num_prompts)
    if target.members:
        result = with_router(result, target, members_before, members_after)
    else:
        result = with_accept(result, before, after, target.log_path)
    why = across_runs(target.name or target.base_url, run_before, _read_run(target), before, after)
    return replace(result, invalid=why) if why else result


def _merge_config(found: BenchConfig, live: BenchConfig) -> BenchConfig:
    """The live ``/server_info`` wins; what it lacks comes from the imported record."""
    return BenchConfig(**{k: (getattr(live, k) if getattr(live, k) is not None else getattr(found, k))
                          for k in BenchConfig.__dataclass_fields__})


def _vocab_size(target: Target, client: SglangClient) -> int:
    folder = target.model_path or _tokenizer_dir(client, target)
    if folder:
        try:
            v = load_json_capped(Path(folder) / "config.json", CONFIG_JSON_MAX, "a model config").get("vocab_size")
            if isinstance(v, int) and v > 1:
                return v
        except (OSError, ValueError, AttributeError):
            pass
    return 32000


def _tail(path: Path, n: int = 20) -> str:
    """The last ``n`` lines of a log, read from its end (a line too long to show is cut and says so)."""
    try:
        chunk = read_last(path, n, max_bytes=TAIL_BYTES)
    except OSError:
        return "(no output)"
    return "(no output)" if chunk.missing else chunk.text.rstrip("\n")
