"""What crosses domains: a benchmark run against a managed server, relaunching a server with an edited
config, sweeping a server's settings, deploying a trained checkpoint, checking that a checkpoint can be
served, the demo workspace and its tiny draft.  Flows import the domains (``backend/sglang``, ``regen``,
``bench``, ``train``, ``telemetry``, ``auth``) and the foundation; no domain imports a flow."""
