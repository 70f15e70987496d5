"""SpecForge draft training: log parsing (every generation's console output and the trackers' local
files), the accept length predicted from per-position acceptance, and checkpoint listing, inspection
and preflight without loading weights.

Nothing here imports streamlit; pages read the records and snapshots these modules return.
"""
