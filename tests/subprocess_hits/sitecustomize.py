"""Imported at the start of every Python process that a test starts during mutmut's stats run
(tests/conftest.py puts this folder first on PYTHONPATH then, and only then): each core function
the process calls is appended to a file of DOTS_SUBPROCESS_HITS at once, so that the test that
started it is counted as reaching that function (mutmut itself sees only the pytest process, so a
function that runs only in a helper process, like the grading helper's loop, had "no tests")."""

from __future__ import annotations

import os

_HITS = os.environ.get("DOTS_SUBPROCESS_HITS")
if _HITS and os.environ.get("MUTANT_UNDER_TEST") == "stats":
    from mutmut.state import state

    class _Recorded(set):
        """mutmut's set of functions hit, also written through to this process's file."""

        def add(self, name: str) -> None:
            if name not in self:
                super().add(name)
                with open(os.path.join(_HITS, f"{os.getpid()}.txt"), "a") as out:
                    out.write(name + "\n")

    state()._stats = _Recorded(state()._stats)
