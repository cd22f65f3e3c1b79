"""The worker that grades every (completion, gold) pair with the named graders, one JSON line per
grader: run as a script (`python benchmarks/grading/worker.py NAMES PAIRS OUT`) by a peer's venv
python, or with an archived dots on PYTHONPATH for `--baseline-ref`, so it imports nothing but the
standard library at its top and nothing of benchmarks/ (the script's folder, not the checkout,
is first on sys.path: the `dots` graded is the one PYTHONPATH names)."""

from __future__ import annotations

import json
import signal
import sys
import time

PEER_TIMEOUT_S = 30


class _PeerTimeout(BaseException):
    pass


def _peer(name: str):
    """The verdict function (completion, gold) -> bool of one peer grader."""
    if name == "math_verify":
        from math_verify import parse, verify

        return lambda c, g: verify(parse(g), parse(c))
    if name == "lm_eval_minerva":
        from lm_eval.tasks.minerva_math import utils as u

        def minerva(c, g):
            ans = u.get_unnormalized_answer(c)
            if ans == "[invalidanswer]":
                box = u.last_boxed_only_string(c)
                if box is None:
                    return False
                ans = u.remove_boxed(box)
            gbox = u.last_boxed_only_string(g)
            gold = u.remove_boxed(gbox) if gbox else g
            return u.is_equiv(u.normalize_final_answer(ans), u.normalize_final_answer(gold))

        return minerva
    if name.startswith("verl_"):
        import importlib

        mod = importlib.import_module("verl.utils.reward_score." + name[len("verl_") :])
        if name == "verl_math_dapo":
            return lambda c, g: mod.compute_score(c, g)["acc"]
        if name == "verl_prime_math":
            return lambda c, g: mod.compute_score(c, g)[0]
        return lambda c, g: mod.compute_score(c, g) == 1.0
    if name == "dots":  # whichever dots is first on PYTHONPATH (--baseline-ref)
        from dots.scoring import is_correct

        return is_correct
    raise ValueError(name)


def worker(names: list[str], pairs_path: str, out_path: str) -> None:
    import logging

    logging.disable(logging.CRITICAL)
    pairs = [json.loads(line) for line in open(pairs_path)]

    def on_alarm(signum, frame):
        raise _PeerTimeout()

    signal.signal(signal.SIGALRM, on_alarm)
    with open(out_path, "w") as out:
        for name in names:
            fn = _peer(name)
            start = time.monotonic()
            verdicts = []
            for p in pairs:
                signal.alarm(PEER_TIMEOUT_S)
                try:
                    verdicts.append(bool(fn(p["completion"], p["gold"])))
                except (Exception, _PeerTimeout):
                    verdicts.append(None)
                finally:
                    signal.alarm(0)
            seconds = time.monotonic() - start
            out.write(json.dumps({"grader": name, "verdicts": verdicts, "seconds": seconds}) + "\n")
            out.flush()


if __name__ == "__main__":
    names, pairs_path, out_path = sys.argv[1:4]
    worker(names.split(","), pairs_path, out_path)
