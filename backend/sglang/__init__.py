"""SGLang server backend: typed launch config, version capabilities, launch builder,
preflight checks, log parsing and ingestion, HTTP client, live monitor and alerts.

Nothing here imports streamlit; pages read :class:`backend.sglang.monitor.ServerSnapshot`.
"""
