"""The pick stage: the Pareto front of the study, the pick, its report and its label-free diagnosis."""
