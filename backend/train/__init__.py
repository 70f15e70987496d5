"""SpecForge draft training: runs, their logs and their checkpoints.

The same inner shape as every domain (``backend/sglang``, ``backend/regen``, ``backend/bench``):

* config: :mod:`~backend.train.config` (a ``[[train]]`` run) and :mod:`~backend.train.table` (its
  check in ``specdeck.toml``); :mod:`~backend.train.generation` (which SpecForge generation a
  python has) and :mod:`~backend.train.specforge_check` (SpecForge's own loader and parser, else its
  flag table per commit range);
* the parsers: :mod:`~backend.train.logparse` (every generation's console output),
  :mod:`~backend.train.trackers` (TensorBoard and MLflow files), :mod:`~backend.train.torchstate`;
* the job: :mod:`~backend.train.command` (the command and Gen-3 YAML), :mod:`~backend.train.runs`
  (runs under the supervisor: start, stop, resume);
* the monitor: :mod:`~backend.train.reader` (a log followed live), :mod:`~backend.train.accept`
  (the accept length predicted from per-position acceptance), :mod:`~backend.train.checkpoints`
  (listed and verified without loading weights).

Nothing here imports streamlit or another domain; serving a checkpoint (preflight, deploy) crosses
into SGLang's domain and lives in :mod:`backend.flows`.
"""
