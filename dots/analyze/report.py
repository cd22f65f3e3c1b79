"""Turn per-tensor counters into analysis.json (docs/method.md §6), grouped by layer and module.

Every number is a plain JSON value; per-layer series are lists indexed by block number
(None where a block has no merged tensor). Fractions are of parameter counts.

module_activation.share_of_module is DoTS Tab. 12's ratio (a module's parameters in the
global top-k / the module's parameters); share_of_top is the composition of the top-k.
(The paper's text and Tab. 12 disagree on which of SFT/RLVR has 4.38% vs 0.48% in the
LM head for Qwen-7B; the definition, not the numbers, is what is implemented here.)
sign_interference.conflict[r] is Fig. 1b: among the non-zero entries of the RLVR vector
kept at the top fraction, the share whose sign the SFT vector kept at retention r
opposes (an entry the SFT vector drops never conflicts); raw.fraction is the 44.91%
figure: opposite signs among entries where both vectors are non-zero.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, Iterable, Mapping

from dots.analyze.counts import PairCounts, SignInterference, SourceCounts
from dots.io.modules import MODULE_CLASSES, layer_index, module_class, module_kind
from dots.vectors.topk import Threshold


def pair_label(a: str, b: str) -> str:
    return f"{a}|{b}"


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _sum_sources(per_name: Mapping[str, Mapping[str, SourceCounts]], names: Iterable[str], key: str) -> SourceCounts:
    total = SourceCounts()
    for name in names:
        total.add(per_name[name][key])
    return total


def _sum_pairs(
    per_name: Mapping[str, Mapping[tuple[str, str], PairCounts]], names: Iterable[str], pair: tuple[str, str]
) -> PairCounts:
    total = PairCounts()
    for name in names:
        total.add(per_name[name][pair])
    return total


def _groups(names: Iterable[str], key_fn: Callable[[str], object]) -> dict:
    out: dict = {}
    for name in names:
        out.setdefault(key_fn(name), []).append(name)
    return out


class _Grouping:
    """Names grouped by block index, by module class (known classes only) and by kind."""

    def __init__(self, names: list[str]):
        self.names = names
        by_layer = _groups(names, layer_index)
        self.non_layer = _groups(by_layer.pop(None, []), module_class)
        self.num_layers = max(by_layer, default=-1) + 1
        self.layers = [by_layer.get(i, []) for i in range(self.num_layers)]
        classes = _groups(names, module_class)
        self.modules = {c: classes[c] for c in MODULE_CLASSES if c in classes}
        self.kinds = dict(sorted(_groups(names, module_kind).items()))

    def per_layer(self, fn: Callable[[list[str]], float | None]) -> list[float | None]:
        return [fn(group) if group else None for group in self.layers]


def build_report(
    *,
    names: list[str],
    keys: list[str],
    source_counts: Mapping[str, Mapping[str, SourceCounts]],
    pair_counts: Mapping[str, Mapping[tuple[str, str], PairCounts]],
    thresholds: Mapping[str, Mapping[int, Threshold]],
    top_k: Mapping[str, int],
    max_abs: Mapping[str, float],
    interference: SignInterference | None,
    eps: float,
    relative_eps: float | None,
    top_fraction: float,
    roles: tuple[str, str] | None,
) -> dict:
    g = _Grouping(names)
    pairs = list(next(iter(pair_counts.values())).keys()) if pair_counts and names else []
    total = {k: _sum_sources(source_counts, names, k) for k in keys}
    numel = total[keys[0]].numel

    def norm(group: list[str], key: str) -> float:
        return math.sqrt(_sum_sources(source_counts, group, key).sumsq)

    def sparsity(group: list[str], key: str, field: str = "changed") -> float | None:
        c = _sum_sources(source_counts, group, key)
        return 1.0 - getattr(c, field) / c.numel if c.numel else None

    report: dict = {
        "numel": numel,
        "tensors": len(names),
        "layers": g.num_layers,
        "sources": keys,
        "module_numel": {c: sum(source_counts[n][keys[0]].numel for n in ns) for c, ns in g.modules.items()},
    }

    norms: dict = {
        "global": {k: math.sqrt(total[k].sumsq) for k in keys},
        "per_layer": {k: g.per_layer(partial(norm, key=k)) for k in keys},
        "non_layer": {k: {c: norm(ns, k) for c, ns in g.non_layer.items()} for k in keys},
        "by_module": {k: {c: norm(ns, k) for c, ns in g.modules.items()} for k in keys},
    }
    if roles:
        num, den = roles
        norms["ratio"] = {
            "numerator": num,
            "denominator": den,
            "global": _ratio(norms["global"][num], norms["global"][den]),
            "per_layer": [
                _ratio(a, b) if a is not None and b is not None else None
                for a, b in zip(norms["per_layer"][num], norms["per_layer"][den])
            ],
        }
    report["norms"] = norms

    spars: dict = {
        "eps": eps,
        "overall": {k: 1.0 - total[k].changed / numel for k in keys},
        "exact_zero": {k: 1.0 - total[k].nonzero / numel for k in keys},
        "max_abs": dict(max_abs),
        "per_layer": {k: g.per_layer(partial(sparsity, key=k)) for k in keys},
        "non_layer": {k: {c: sparsity(ns, k) for c, ns in g.non_layer.items()} for k in keys},
        "by_module": {k: {c: sparsity(ns, k) for c, ns in g.modules.items()} for k in keys},
        "by_kind": {k: {kind: sparsity(ns, k) for kind, ns in g.kinds.items()} for k in keys},
        "relative": None,
    }
    if relative_eps is not None:
        spars["relative"] = {
            "relative_eps": relative_eps,
            "max_abs": dict(max_abs),
            "overall": {k: 1.0 - total[k].changed_rel / numel for k in keys},
            "per_layer": {k: g.per_layer(partial(sparsity, key=k, field="changed_rel")) for k in keys},
            "by_module": {k: {c: sparsity(ns, k, "changed_rel") for c, ns in g.modules.items()} for k in keys},
        }
    report["sparsity"] = spars

    report["topk"] = {
        "fraction": top_fraction,
        "thresholds": {
            k: [{"k": t.k, "value": t.value, "ties_kept": t.ties} for _, t in sorted(thresholds[k].items())]
            for k in keys
        },
    }

    def top_share(group: list[str], key: str) -> float | None:
        c = _sum_sources(source_counts, group, key)
        return c.top / c.numel if c.numel else None

    report["module_activation"] = {
        "fraction": top_fraction,
        "share_of_module": {k: {c: top_share(ns, k) for c, ns in g.modules.items()} for k in keys},
        "share_of_top": {
            k: {c: _ratio(_sum_sources(source_counts, ns, k).top, top_k[k]) for c, ns in g.modules.items()}
            for k in keys
        },
        "per_layer": {k: g.per_layer(partial(top_share, key=k)) for k in keys},
        "top_k": dict(top_k),
    }

    report["sign_interference"] = None
    if interference is not None:
        raw = _sum_pairs(pair_counts, names, _ordered_pair(pairs, interference.sft, interference.rlvr))
        report["sign_interference"] = {
            "sft": interference.sft,
            "rlvr": interference.rlvr,
            "rlvr_fraction": top_fraction,
            "rlvr_kept_nonzero": interference.rlvr_kept,
            "retentions": list(interference.retentions),
            "sft_kept": [m.threshold.k for m in interference.sft_masks],
            "opposite": list(interference.opposite),
            "conflict": [_ratio(o, interference.rlvr_kept) for o in interference.opposite],
            "raw": {
                "both_nonzero": raw.both_nonzero,
                "opposite": raw.opposite,
                "fraction": _ratio(raw.opposite, raw.both_nonzero),
            },
        }

    report["pairs"] = {}
    for a, b in pairs:
        c = _sum_pairs(pair_counts, names, (a, b))

        def cosine(group: list[str], a=a, b=b) -> float | None:
            pc = _sum_pairs(pair_counts, group, (a, b))
            den = norm(group, a) * norm(group, b)
            return pc.dot / den if den else None

        report["pairs"][pair_label(a, b)] = {
            "a": a,
            "b": b,
            "sign": {
                "both_nonzero": c.both_nonzero,
                "opposite": c.opposite,
                "fraction": _ratio(c.opposite, c.both_nonzero),
            },
            "regions": {
                "conflict": c.conflict / numel,
                "agree": c.agree / numel,
                "overlap": (c.conflict + c.agree) / numel,
                "private": c.private / numel,
                "unchanged": c.unchanged / numel,
            },
            "region_counts": {"conflict": c.conflict, "agree": c.agree, "private": c.private, "unchanged": c.unchanged},
            "cosine": cosine(names),
            "cosine_per_layer": g.per_layer(cosine),
            "conflict_norm": math.sqrt(c.conflict_sq),
        }

    overlap: dict = {"eps": eps, "sources": {}}
    for k in keys:
        hist = list(total[k].overlap) + [0] * (len(keys) - len(total[k].overlap))
        changed = total[k].changed
        unique, shared = hist[0], sum(hist[1:])
        overlap["sources"][k] = {
            "changed": changed,
            "counts": hist,
            "histogram": [_ratio(h, changed) for h in hist],
            "unique": unique,
            "shared": shared,
            "unique_share": _ratio(unique, changed),
            "rho": _ratio(shared, unique),
        }
    report["overlap"] = overlap
    report["summary"] = _summary(report, keys, roles)
    return report


def _ordered_pair(pairs: list[tuple[str, str]], a: str, b: str) -> tuple[str, str]:
    return (a, b) if (a, b) in pairs else (b, a)


def _summary(report: dict, keys: list[str], roles: tuple[str, str] | None) -> dict:
    out: dict = {
        "norm": report["norms"]["global"],
        "sparsity": report["sparsity"]["overall"],
        "unique_share": {k: report["overlap"]["sources"][k]["unique_share"] for k in keys},
    }
    if roles:
        out["norm_ratio"] = report["norms"]["ratio"]["global"]
        si = report["sign_interference"]
        out["sign_conflict_raw"] = si["raw"]["fraction"]
        out["sign_conflict_by_retention"] = dict(zip((f"{r:g}" for r in si["retentions"]), si["conflict"]))
    return out
