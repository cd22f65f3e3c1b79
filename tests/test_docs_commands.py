"""Every command README.md and docs/ show, and the figures they state.

Each `python -m dots.…` or `dots VERB …` line of a code block or code span is read back: its
module must exist and its options must compose with that command's config (placeholders such as
DIR or <run> aside) — so a renamed option cannot linger in the docs. The cheap commands then run
(the lab's at its smallest size) and what they print is compared with what the text states:
`dots --help` with docs/install.md's listing, each verb's `--help`, the landscape command, a lab
variant's build, and the README's headline accuracies with the command the README names for them.
Runs that start an inference engine or a cluster (the searches, the doctor, evaluate, SLURM,
tracking servers, the Hub) are too slow for CI here and are each run by their own tests (HEAVY);
the figures of those runs are compared with the records they wrote in tests/test_docs_figures.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
COMMAND = re.compile(r"^(?:python -m (dots(?:\.\w+)+)|dots ([a-z]+))(?=\s|$)(.*)$")
PLACEHOLDER = re.compile(r"<[^>]*>|…|\.\.\.|\[.*?\]|[A-Z]{2,}\w*\.(?:json|jsonl)$")

# what runs where instead of here (minutes each: an engine start, a cluster, a server or the Hub)
HEAVY = {
    "dots.search": "starts vLLM/transformers (a minute or more per run): tests/test_search*.py, test_pools.py",
    "dots.doctor": "starts an engine on a generated model: tests/test_doctor.py",
    "dots.evaluate": "starts an engine: tests/test_evaluate.py",
    "dots.merge": "a merge of real checkpoints: tests/test_merge.py (and here, for the README's pick)",
    "dots.export": "uploads to the Hub: tests/test_hub_path.py",
    "dots.io": "converts a checkpoint: tests/test_checkpoint.py",
    "dots.scoring.worker": "the grading worker process: tests/test_grading_timeout.py",
}


def doc_commands() -> list[tuple[str, str, str]]:
    """(file, module, arguments) of every command the docs show, continuation lines joined."""
    found = set()
    for path in DOCS:
        text = path.read_text()
        lines = []
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
            lines += block.replace("\\\n", " ").splitlines()
        lines += re.findall(r"^    (?:\$ )?(.+)$", text, re.M)
        lines += re.findall(r"`([^`\n]+)`", text.replace("\n", " "))
        for line in lines:
            line = re.split(r"\s+#\s", line.strip().removeprefix("$ "))[0].strip()
            m = COMMAND.match(line)
            if not m:
                continue
            module = m.group(1) or f"dots.{m.group(2)}"
            from dots.options.cli import VERBS

            if m.group(2) and m.group(2) not in VERBS:  # prose ("dots knows …"), not a command
                continue
            found.add((path.name, module, " ".join(m.group(3).split())))
    return sorted(found)


def arguments(args: str) -> list[str]:
    """The command's words with placeholders dropped (`<run>`, `[overwrite=true]`, `…`); `seed=L` as seed=1."""
    words = []
    for word in re.findall(r"'[^']*'|\S+", args.replace("[overwrite=true]", "")):
        word = word.strip("'")
        if PLACEHOLDER.search(word) or word in ("VERB", "ARGS"):
            continue
        words.append(re.sub(r"=L$", "=1", word))
    return words


def test_the_docs_show_commands_of_every_verb():
    """The reader (doc_commands) finds the README's main commands: it would not pass over them silently."""
    shown = {(f, m) for f, m, _ in doc_commands()}
    for needed in [("README.md", "dots.search"), ("README.md", "dots.lab"), ("install.md", "dots.doctor")]:
        assert needed in shown or (needed[0], needed[1]) in shown or needed[1] in {m for _, m in shown}
    assert len(doc_commands()) > 40


@pytest.mark.parametrize("where,module,args", doc_commands(), ids=lambda v: str(v)[:60])
def test_every_command_shown_exists_and_its_options_compose(where, module, args):
    """A command of the docs: its module exists, and its key=value options are the command's own
    (composed in memory with dots' one-line check, as the command does first)."""
    import importlib.util

    from dots.options.compose import check_overrides

    spec = importlib.util.find_spec(module) or importlib.util.find_spec(f"{module}.__main__")
    assert spec is not None, f"{where}: {module} is not a module"
    words = arguments(args)
    overrides = [w for w in words if "=" in w and not w.startswith("-")]
    verb = module.removeprefix("dots.")
    if verb == "lab":
        from dots.lab.config import load_config

        load_config(overrides)
    elif verb in ("search", "merge", "evaluate", "analyze", "plan", "doctor"):
        if verb == "merge":  # (merge's own reading: `+backbone.sources.KEY=` may replace the backbone's)
            overrides = [re.sub(r"^\+backbone\.sources\.", "++backbone.sources.", w) for w in overrides]
        config = {"plan": "search", "doctor": "search"}.get(verb, verb)
        check_overrides(config, [w for w in overrides if not w.startswith("hydra.")], multirun="-m" in words)


def run(*argv: str, env: dict | None = None, cwd: Path = REPO) -> str:
    import os

    done = subprocess.run(
        [sys.executable, *argv], cwd=cwd, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO), "DOTS_PROGRESS": "0", **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_dots_help_is_the_listing_install_md_shows_and_each_verb_shows_its_own_options():
    """`dots --help` prints docs/install.md's listing line for line (every verb, the doctor too);
    `dots search --help` names search's groups only, without Hydra's banner."""
    shown = (REPO / "docs" / "install.md").read_text().split("    $ dots --help\n", 1)[1]
    listing = [line.removeprefix("    ") for line in shown.split("\n\n    dots search", 1)[0].splitlines()]
    from dots.options.cli import usage  # (what the `dots` console script prints)

    printed = usage()
    assert printed.splitlines() == listing
    help_text = run("-m", "dots.search", "--help")
    assert "powered by Hydra" not in help_text and "sampler" in help_text and "show_plan" in help_text
    assert "method " not in help_text and "benchmark " not in help_text  # merge's and evaluate's groups


def test_landscape_command_draws_the_readme_picture(tmp_path):
    """README: `python -m dots.search.pick.landscape docs/figures/lab/landscape-run` draws landscape.png
    from trials.csv and result.yaml alone (run on a copy, so the repository is not written)."""
    run_dir = shutil.copytree(REPO / "docs" / "figures" / "lab" / "landscape-run", tmp_path / "landscape-run")
    run("-m", "dots.search.pick.landscape", str(run_dir))
    assert (run_dir / "landscape.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_lab_variant_says_what_it_trains_and_builds_at_its_smallest_size(tmp_path):
    """docs/lab.md: `python -m dots.lab seed=1 rlvr.lr=1e-6` — a variant is trained under the outputs
    root, the time the shipped build took said first; here at its smallest size (a few steps)."""
    smallest = ["base.steps=2", "base.warmup=1", "sft.examples=8", "sft.epochs=1", "rlvr.steps=1",
                "rlvr.prompts_per_step=2", "rlvr.samples_per_prompt=2", "eval.enabled=false"]  # fmt: skip
    out = run("-m", "dots.lab", "seed=1", "rlvr.lr=1e-6", *smallest, env={"DOTS_OUTPUTS": str(tmp_path)})
    first = out.splitlines()[0]
    assert first.startswith("lab trio: training base, sft, rlvr in ") and " min on an idle 2-core VM" in first
    for stage in ("base", "sft", "rlvr"):
        assert f"{stage}: {tmp_path / 'lab'}" in out
    again = run("-m", "dots.lab", "seed=1", "rlvr.lr=1e-6", *smallest, env={"DOTS_OUTPUTS": str(tmp_path)})
    assert again.splitlines()[0] == f"lab trio: found the build in {tmp_path / 'lab'}"


def stated(text: str, pattern: str) -> list[float]:
    match = re.search(pattern, " ".join(text.split()))
    assert match, f"the docs no longer state {pattern!r}"
    return [float(x) for x in match.groups()]


def test_readme_accuracies_are_what_the_command_it_names_prints(tmp_path, capsys):
    """README: the pick λ = (SFT 0.61, RLVR 0.63) scores 88.6% against SFT 78.3% and RLVR 70.3%, and
    `dots lab --model dots=<run dir>/model` prints them; so do docs/lab.md's ground truth and its
    evaluate table's rows of the four (`engine=hf engine.dtype=float32` scores as the lab does). The
    pick's exact λ is the README run's (docs/figures/lab/landscape-run/result.yaml); its export is
    made with `dots merge method=dots_fixed`, as the search exports it; the lab command prints the
    A∪B greedy column."""
    import yaml

    from dots.lab.__main__ import main as lab
    from dots.merge.__main__ import run_from_config
    from dots.options.compose import compose

    readme = (REPO / "README.md").read_text()
    pick, sft, rlvr = stated(readme, r"scores (\d+\.\d)% on the lab's labeled test problems \(greedy, 1,024\) "
                                     r"against SFT (\d+\.\d)% and RLVR (\d+\.\d)%")  # fmt: skip
    assert "`dots lab --model dots=<run dir>/model` prints them" in " ".join(readme.split())
    result = yaml.safe_load((REPO / "docs" / "figures" / "lab" / "landscape-run" / "result.yaml").read_text())
    weights = [f"+method.weights.{k}={v!r}" for k, v in result["coefficients"].items()]
    model = tmp_path / "pick"
    merge = ["method=dots_fixed", *weights, f"output={model}", f"cache_dir={tmp_path / 'cache'}"]
    run_from_config(compose("merge", merge))
    capsys.readouterr()
    lab(["--model", f"dots={model}", "eval.samples=0"])  # the greedy columns (the sampled ones cost 4×)
    rows = {}
    for line in capsys.readouterr().out.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
        if len(cells) == 4 and cells[0] in ("base", "sft", "rlvr", "dots"):
            rows[cells[0]] = float(cells[3])  # A∪B greedy, in %
    assert (rows["dots"], rows["sft"], rows["rlvr"]) == (pick, sft, rlvr)
    lab_md = (REPO / "docs" / "lab.md").read_text()
    assert stated(lab_md, r"Ground truth \(greedy, 1024 test problems, A∪B\): base (\d+\.\d)%, SFT (\d+\.\d)%, "
                          r"RLVR (\d+\.\d)%") == [rows["base"], sft, rlvr]  # fmt: skip
    from test_docs_figures import methods_table  # docs/lab.md's evaluate table: the same four, to the digit

    table = methods_table()
    four = ("base", "sft", "rlvr", "dots")
    assert [table[m if m != "dots" else "dots_pick"][0] for m in four] == [rows[m] for m in four]
