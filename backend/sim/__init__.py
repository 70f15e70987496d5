"""Simulated SGLang server and fake model directories for machines without a GPU."""
