"""Regeneration: ask a target model again for the answers a draft learns from.

The same inner shape as every domain (``backend/sglang``, ``backend/train``, ``backend/bench``):

* config: :mod:`~backend.regen.config` (a job's settings) and :mod:`~backend.regen.table` (the
  ``[[dataset]]`` and ``[[mix]]`` tables' check in ``specdeck.toml``, with :mod:`~backend.regen.catalog`);
* the parsers: :mod:`~backend.regen.datasets` (input rows of every format), :mod:`~backend.regen.records`;
* the job: :mod:`~backend.regen.job` (resumable, exactly once), :mod:`~backend.regen.turns` (asking one
  row's turns), :mod:`~backend.regen.output` (what it
  writes and ``regen validate``), :mod:`~backend.regen.progress`, :mod:`~backend.regen.control`
  (pause, resume, requeue, stop);
* the monitor: :mod:`~backend.regen.follow` (Specdeck's own job) and
  :mod:`~backend.regen.follow_specforge` (SpecForge's script), :mod:`~backend.regen.samples`;
* the client: :mod:`~backend.regen.client` (a server's OpenAI-compatible API).

Nothing here imports streamlit or another domain; what crosses domains is in :mod:`backend.flows`.
"""
