"""Bisect and the pre-merge gate: the search, the driver, the version runner, the verdict."""
