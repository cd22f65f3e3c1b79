"""The `dots` command (`dots VERB ...` runs `python -m dots.VERB ...`) and what every
`python -m dots.<verb>` does before its work."""

from __future__ import annotations

import functools
import logging
import re
import runpy
import sys
from typing import Any, Callable, Sequence

from dots.errors import DotsError, cli_errors, one_line
from dots.paths import CONF_DIR
from dots.runtime.allocator import reuse_freed_memory
from dots.runtime.progress import quiet_third_party
from dots.runtime.signals import exit_on_sigterm

__all__ = ["VERBS", "check_command_line", "command_help", "hydra_command", "prepare_command", "usage"]

# Hydra flags after which dots does not read the command line itself (help, shell completion,
# another config source: Hydra reports on those), and flags that take the next word as value
HYDRA_HANDS_OFF = {
    "-h",
    "--help",
    "--hydra-help",
    "-i",
    "--info",
    "-sc",
    "--shell-completion",
    "-cd",
    "--config-dir",
    "-cp",
    "--config-path",
    "-cn",
    "--config-name",
    "--experimental-rerun",
}
HYDRA_VALUED = {"-c", "--cfg", "-p", "--package"}

# `dots VERB` runs the module `dots.VERB` as `python -m` does; one line each for `dots --help`
VERBS = {
    "search": "the DoTS pipeline: task vectors, λ search, pick, export (resumes when rerun)",
    "merge": "one baseline merge (ties, dare, task_arithmetic, ...) of checkpoints into a model",
    "evaluate": "models × benchmarks with one live engine",
    "analyze": "the task-vector anatomy of a backbone's sources: analysis.json and figures",
    "lab": "the lab trio of tiny models (shipped; --rebuild trains it) and its test accuracy in %",
    "plan": "the memory plan of a search, printed without running it",
    "export": "upload an exported model to the Hub (retry of a failed push)",
    "io": "convert a .bin checkpoint to safetensors, or list a checkpoint's tensors",
    "doctor": "the first command on a new node: versions, devices, memory plan, a swap proved end to end",
}


def usage() -> str:
    """`dots --help`: the verbs, one line each."""
    width = max(map(len, VERBS))
    lines = [
        "usage: dots VERB [ARGS ...]   (the same as python -m dots.VERB [ARGS ...])",
        "",
        "verbs:",
        *(f"  {verb:<{width}}  {what}" for verb, what in VERBS.items()),
        "",
        "`dots VERB --help` describes a verb's arguments.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """The `dots` console script: `dots VERB ARGS...` runs `dots.VERB` as `__main__` with ARGS
    as its command line, exactly as `python -m dots.VERB ARGS...`; an unknown verb is one
    `error:` line and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage(), file=sys.stdout if args else sys.stderr)
        sys.exit(0 if args else 2)
    if args[0] == "--version":
        from dots import __version__

        print(f"dots {__version__}")
        return
    verb = args[0]
    if verb not in VERBS:
        print(f"error: unknown verb {verb!r}: dots {' | '.join(VERBS)} (dots --help)", file=sys.stderr)
        sys.exit(2)
    sys.argv = [sys.argv[0], *args[1:]]  # run_module puts the module's file in sys.argv[0], as -m does
    runpy.run_module(f"dots.{verb}", run_name="__main__", alter_sys=True)


def prepare_command(log_level: int = logging.INFO) -> None:
    """dots' own log lines at `log_level` (other libraries' held for the log file), glibc keeping freed
    memory for the next tensor (`dots.runtime.allocator`), and SIGTERM turned into a clean exit
    (`dots.runtime.signals`)."""
    logging.getLogger("dots").setLevel(log_level)
    quiet_third_party()  # other libraries' lines: to the command's log file (dots.runtime.progress)
    reuse_freed_memory()
    exit_on_sigterm()


def check_command_line(config_name: str, argv: Sequence[str] | None = None) -> None:
    """Before `@hydra.main` parses it: a bad override (unknown group option or key, a value Hydra
    cannot compose) ends the command with one `error:` line and exit code 2
    (`dots.options.compose.check_overrides`) instead of Hydra's multi-line report."""
    args = list(sys.argv[1:] if argv is None else argv)
    if HYDRA_HANDS_OFF & {a.split("=", 1)[0] for a in args}:
        return
    overrides, multirun, skip = [], False, False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-m", "--multirun"):
            multirun = True
        elif arg in HYDRA_VALUED:
            skip = True
        elif not arg.startswith("-"):
            overrides.append(arg)
    from dots.options.compose import check_overrides

    try:
        check_overrides(config_name, overrides, multirun=multirun)
    except DotsError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)


def hydra_command(config_name: str, run: Callable[[Any], None]) -> Callable[[], None]:
    """The command of a `dots/<verb>/__main__.py` with a Hydra config (and its launchers, e.g. SLURM
    sweeps): its command line checked by dots first (one-line errors), then `@hydra.main` composes
    dots/conf/<config_name>.yaml and calls `run(cfg)` after `prepare_command`, a DotsError as one
    line. Hydra sees `run` itself (unwrapped), so its job name is that of `run`'s file (`__main__`);
    the config directory is given absolute, so an installed entry point finds it too."""
    import hydra

    @functools.wraps(run)
    def task(cfg: Any) -> None:
        prepare_command()
        run(cfg)

    main = hydra.main(config_path=str(CONF_DIR), config_name=config_name, version_base="1.3")(cli_errors(task))

    def command() -> None:
        if {"-h", "--help"} & set(sys.argv[1:]):  # (Hydra's own help lists every command's groups)
            print(command_help(config_name, sys.modules[run.__module__].__doc__ or ""))
            return
        check_command_line(config_name)
        main()

    return command


_TOP_KEY = re.compile(r"^([A-Za-z_]\w*):\s*([^#]*?)\s*(?:#\s*(.*))?$")


def command_help(config_name: str, doc: str, hydra: bool = True) -> str:
    """`dots VERB --help` for a command configured by dots/conf/<config_name>.yaml: its docstring,
    the groups its defaults list chooses from (with their options) and its own top-level keys, each
    with the comment the YAML gives it — nothing of other commands' groups, nor Hydra's banner."""
    import yaml

    path = CONF_DIR / f"{config_name}.yaml"
    text = path.read_text()
    defaults = yaml.safe_load(text).get("defaults") or []
    chosen = {k: v for d in defaults if isinstance(d, dict) for k, v in d.items() if (CONF_DIR / k).is_dir()}
    lines = [doc.strip(), "", "groups (GROUP=OPTION; the default in brackets):"]
    width = max(map(len, chosen), default=0)
    for group, default in chosen.items():
        names = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
        shown = [f"[{n}]" if n == default else n for n in names] + (["[none]"] if default is None else [])
        lines.append(f"  {group:<{width}}  {' '.join(shown)}")
    lines += ["", f"options (KEY=VALUE; a section's keys as SECTION.KEY=VALUE; every key is commented in {path.name}):"]
    keys = [m.groups() for line in text.splitlines() if (m := _TOP_KEY.match(line))]
    keys = [(k, v, c) for k, v, c in keys if k not in ("defaults", "hydra")]
    width = max((len(k) + (0 if v else 2) for k, v, _ in keys), default=0)
    for key, value, comment in keys:
        name = key if value else f"{key}.*"
        named = CONF_DIR / key.removesuffix("s")  # (evaluate's `benchmarks`: names from conf/benchmark/)
        if value and key not in chosen and named.is_dir():
            listed = " ".join(sorted(p.stem for p in named.glob("*.yaml")))
            comment = f"{comment + '; ' if comment else ''}from {named.name}/: {listed}"
        lines.append(f"  {name:<{width}}  {value or ''}{'  # ' + comment if comment else ''}".rstrip())
    if hydra:  # (a command run through @hydra.main, not the compose API)
        lines += ["", "Hydra's own flags (--cfg job, --multirun, --config-dir DIR): --hydra-help"]
    return "\n".join(lines)
