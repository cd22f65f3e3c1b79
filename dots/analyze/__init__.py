"""Task-vector analysis (docs/method.md §6): streaming statistics of τ_i = θ_i − θ0 and their figures,
`python -m dots.analyze`.

`dots.analyze.run.analyze` is the entry point; the pieces are: `modules` (which module class
and layer a tensor belongs to), `stream` (τ in bounded row chunks, read by
`dots.vectors.deltas`), `counts` (the per-pass counters, exact global top-k thresholds from
`dots.vectors.topk`), `report` (aggregation into analysis.json) and `figures` (the PNGs).
"""
