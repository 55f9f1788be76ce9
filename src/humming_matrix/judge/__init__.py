"""Judging two runs: statistics, family-wise control, the paired comparison."""
