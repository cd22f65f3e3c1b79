"""Task-vector analysis (SPEC §6): streaming statistics of τ_i = θ_i − θ0 and their figures.

`dots.analyze.analyze` is the entry point; the pieces are: `modules` (which module class
and layer a tensor belongs to), `stream` (τ in bounded row chunks), `topk` (exact global
top-k thresholds from radix histograms), `counts` (the per-pass counters), `report`
(aggregation into analysis.json) and `figures` (the PNGs).
"""
