"""The pick's options (conf/search.yaml `pick` and `confirm:`, docs/method.md §5) as typed, frozen
objects checked when made. Defaults are conf/search.yaml's (tests/test_option_defaults.py)."""

from __future__ import annotations

from dataclasses import dataclass

from dots.checks import check_choice, check_flag, positive_int

__all__ = ["CONFIRM_QUERIES", "PICKS", "ConfirmOptions"]

PICKS = ("agreement", "knee", "max_consistency", "smoothed")  # dots.search.pick.rules.PICK_RULES
CONFIRM_QUERIES = ("selection", "held_out")  # the selected queries again, or as many others of the pool


@dataclass(frozen=True)
class ConfirmOptions:
    """Re-score the pick rule's `top` candidates with `k` fresh samples per query before picking
    (dots.search.pick.confirm); `queries`: on the selection again or on held-out pool queries."""

    enabled: bool = True
    top: int = 3
    k: int = 8
    queries: str = "selection"

    def __post_init__(self) -> None:
        object.__setattr__(self, "enabled", check_flag(self.enabled, "confirm.enabled"))
        object.__setattr__(self, "top", positive_int(self.top, "confirm.top"))
        object.__setattr__(self, "k", positive_int(self.k, "confirm.k"))
        check_choice(self.queries, CONFIRM_QUERIES, "confirm.queries")
