"""The research pipeline: plan, gather, dedup, verify, gaps, synthesize (see run.py)."""
