"""Specdeck's backend: plain Python, never imports streamlit."""
