"""2. Stage: the stateful window stage (packs -> one closed row per (bucket, window))."""
