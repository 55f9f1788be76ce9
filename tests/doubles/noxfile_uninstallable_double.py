"""TEST DOUBLE of the project's noxfile for bisects over stored records: every `humming-<v>`
session of the versions in $NOXFILE_DOUBLE_VERSIONS fails the way an uninstallable release
does, fast and without creating an environment. A probe only runs a session when the store
lacks the version's records, so only the planted unrunnable version ever reaches this."""

from __future__ import annotations

import os

import nox

for _version in os.environ.get("NOXFILE_DOUBLE_VERSIONS", "").split(","):

    @nox.session(name=f"humming-{_version}", python=False)
    def _uninstallable(session: nox.Session, version: str = _version) -> None:
        print(
            f"error: No solution found when resolving dependencies: humming-kernels=={version}"
            " has no wheel here"
        )
        session.error("installing the cell failed")
