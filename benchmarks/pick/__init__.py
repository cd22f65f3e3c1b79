"""Does the pick beat both sources? Studies on labs (trios of `python -m dots.lab seed=L`) scored
against each lab's ground truth: the task-vector facts and the λ grid, every merge, the samplers,
the cost levers and pick rules, the confirmation stage (results: benchmarks/results/pick.md and
docs/lab.md)."""

from benchmarks.harness.entry import Variant

VARIANTS = {
    "grid": Variant("benchmarks.pick.grid", "task-vector facts and a 5x5 merge grid on the lab trio"),
    "methods": Variant("benchmarks/pick/methods.sh", "every merge of the lab trio in one evaluate table"),
    "samplers": Variant("benchmarks.pick.samplers", "samplers x adaptive sampling on several labs (#20)"),
    "study": Variant("benchmarks.pick.study", "five labs: cost levers and pick rules (#30, #31)"),
    "confirm": Variant("benchmarks.pick.confirm", "confirmation and smoothed picks, heldout grid, surrogate (#42)"),
}

SMOKE = [["grid", "--samples", "1", "--per-skill", "4", "--no-grid", "--threads", "1"]]
