"""The study stage: Optuna's ask/tell loop over λ (`trials`), its samplers, the scorer of one
trial, adaptive sampling, pruning, stopping, workers' heartbeats and what is tracked."""
