"""What does a search cost? The whole lab search with one live engine against save-and-restart
per trial, one worker against two on SLURM, and what pruning and stopping save (results:
benchmarks/results/search.md)."""

from benchmarks.harness.entry import Variant

VARIANTS = {
    "restart": Variant("benchmarks.search.restart", "whole lab search: dots vs save-and-restart per trial"),
    "parallel": Variant("benchmarks.search.parallel", "1 search worker vs 2 as SLURM jobs on the lab"),
    "prune-stop": Variant("benchmarks.search.prune_stop", "what search.prune and search.stop save (lab, simulate)"),
}

SMOKE = [["prune-stop", "simulate", "--samplers", "random", "--seeds", "1", "--trials", "4", "--batch", "8"]]
