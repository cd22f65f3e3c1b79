"""dots reads a command line before Hydra does (dots.options.compose.check_overrides, dots.options.cli):
what it lets through and what it stops, in process (the CLI runs are in test_bad_inputs.py)."""

from __future__ import annotations

import pytest

from dots.errors import DotsError
from dots.options.cli import check_command_line
from dots.options.compose import check_overrides


@pytest.mark.parametrize(
    "config, args",
    [
        ("search", ["backbone=custom", "backbone.base=/b", "+backbone.sources.sft=/s", "pool=jsonl", "pool.path=p"]),
        (
            "search",
            ["+backbone.sources.third=/t", "+engine.extra_args.max_num_batched_tokens=64", "search.range=[0,1]"],
        ),
        ("search", ["hydra/launcher=slurm", "hydra.launcher.timeout_min=5", "seed=1"]),
        ("analyze", ["~backbone", "+backbone.name=t", "+backbone.base=/b", "+backbone.sources.sft=/s"]),
        ("evaluate", ["+models.x=/m", "+overrides.lab_add.limit=2"]),
        ("merge", ["method=ties", "method.density=0.2", "++backbone.sources.sft=/s"]),
    ],
)
def test_good_command_lines_pass(config, args):
    check_overrides(config, args)


def test_sweeps_are_checked_choice_by_choice():
    check_overrides("search", ["backbone=lab,qwen7b", "seed=0,1"], multirun=True)
    with pytest.raises(DotsError, match="unknown backbone 'qwen8b'.*did you mean qwen7b"):
        check_overrides("search", ["backbone=lab,qwen8b"], multirun=True)
    with pytest.raises(DotsError, match="did you mean seed"):
        check_overrides("search", ["sed=0,1"], multirun=True)


def test_an_added_key_is_only_taken_in_open_sections():
    with pytest.raises(DotsError, match=r"unknown option search.bogus in the search config$"):
        check_overrides("search", ["+search.bogus=1"])
    with pytest.raises(DotsError, match=r"add a new key with \+engine.extra_args.bogus=..."):
        check_overrides("search", ["engine.extra_args.bogus=1"])


def test_hydra_flags_are_left_to_hydra(capsys):
    check_command_line("search", ["--cfg", "job", "seed=1"])  # --cfg takes a value
    check_command_line("search", ["--config-dir", "/mine", "backbone=mine"])  # the user's own groups
    check_command_line("search", ["--help"])
    with pytest.raises(SystemExit) as exc:
        check_command_line("search", ["-m", "serach.n_trials=1,2"])
    assert exc.value.code == 2 and capsys.readouterr().err.strip().count("\n") == 0
