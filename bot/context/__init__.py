"""One turn's context: what the model reads, chosen from the store and explained.

The builder fetches, the ranking stages decide, the fast model triages, semantic recall adds what
means the same; the prompt is assembled here, compaction summarises the old part, replay rebuilds it.
"""
