"""Regeneration: ask a target model again for the answers a draft learns from."""
