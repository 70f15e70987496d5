"""SGLang servers: their config, the checks before a launch, their logs read live, their HTTP client.

The same inner shape as every domain (``backend/regen``, ``backend/train``, ``backend/bench``):

* config: :mod:`~backend.sglang.config` (a ``[[server]]`` entry as a typed value) and
  :mod:`~backend.sglang.table` (its check in ``specdeck.toml``);
  :mod:`~backend.sglang.version` (what each SGLang version means for the flags, endpoints, metrics);
* the parsers: :mod:`~backend.sglang.logparse` (one log line), :mod:`~backend.sglang.bulkparse`
  (many megabytes at once), :mod:`~backend.sglang.logevents` and :mod:`~backend.sglang.startup`
  (start-up phases and failures);
* the job: :mod:`~backend.sglang.launch` (the argv), :mod:`~backend.sglang.fleet` (the servers under
  the supervisor); before it, :mod:`~backend.sglang.preflight` with SGLang's own parser
  (:mod:`~backend.sglang.argcheck`, :mod:`~backend.sglang.argworker`, :mod:`~backend.sglang.argshare`);
* the monitor: :mod:`~backend.sglang.ingest`, :mod:`~backend.sglang.logwatch`,
  :mod:`~backend.sglang.monitor` (:class:`~backend.sglang.monitor.ServerSnapshot`, what pages read),
  :mod:`~backend.sglang.livefigures`, :mod:`~backend.sglang.alerts`;
* the client: :mod:`~backend.sglang.client` (``/health``, ``/metrics``, ``/server_info``).

Nothing here imports streamlit or another domain; what crosses domains is in :mod:`backend.flows`.
"""
