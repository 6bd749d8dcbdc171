"""Ranking older messages for a turn: pure stages over stored messages and the candidate pool.

The candidates found by recency, words (`lexical`) and meaning (`embedding`), fused by rank, and the
token budget that trims what does not fit. No store and no model here: the context package calls these.
"""
