"""A property-based fuzzer of every reader of user data, through the real command lines.

Hypothesis generates malformed inputs (JSONL and parquet pools, config.json files,
safetensors headers, safetensors index files, and option values of `dots.search`,
`dots.merge` and `dots.evaluate`), each bad by construction, and every example asserts what
a user must see: exit code 2, exactly one stderr line starting `error:` that names the file
(and the line or row) or the option by its whole path, no traceback, and nothing created,
changed or removed anywhere (inputs, working directory, HOME, DOTS_OUTPUTS, HF_HOME,
XDG_CACHE_HOME, TMPDIR and the output's parent all live in one snapshotted tree).

The commands run as `python -m dots.<verb>` would, in children forked from one warm runner
(tests/cli_runner.py explains why that is the same thing), so an example costs the command's
own work, not an import of torch. Profiles (`DOTS_FUZZ`): `ci` (default: a few examples per
target, and every option of every command once, plus the explicit `@example`s, drawn from a
seed that is the commit's hash — another set at each commit, the same on a rerun of one;
`DOTS_FUZZ_SEED` sets it) and `long` (thousands of examples; no per-test timeout). Before
any bad input, each command runs once on its good input in the same harness and must exit 0
(the positive control: a harness that refused everything would fail there). The issue's inputs
and the defects found on main are kept as explicit `@example`s (a defect a long run finds
joins them).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from dots.io.metadata import CONFIG_FIELDS

REPO = Path(__file__).resolve().parent.parent
# no example database (database=None below), and Hypothesis' other caches (constants, unicode
# tables) outside the repository
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "dots-hypothesis")
PROFILE = os.environ.get("DOTS_FUZZ", "ci")
LONG = PROFILE == "long"


def commit_seed() -> int:
    """The examples' seed: `DOTS_FUZZ_SEED` when set (to reproduce a failure), else the checked-out
    commit's hash — so each commit draws other examples, and a failure reproduces on its commit."""
    if os.environ.get("DOTS_FUZZ_SEED"):
        return int(os.environ["DOTS_FUZZ_SEED"])
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return int(head.stdout.strip()[:12] or "0", 16)


SEED = commit_seed()
FUZZ = settings(
    max_examples=int(os.environ.get("DOTS_FUZZ_EXAMPLES", 600 if LONG else 6)),
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
OPTION_FUZZ = settings(FUZZ, max_examples=int(os.environ.get("DOTS_FUZZ_EXAMPLES", 600 if LONG else 1)))
if LONG:
    pytestmark = pytest.mark.timeout(0)
COUNTS: dict[str, int] = {}  # examples run per target (the long run's record)


# --- the warm runner and the sandbox ---------------------------------------------------------------


class Sandbox:
    """Inputs, working directories, outputs and caches under one root, and the runner whose
    environment points every output and cache there."""

    def __init__(self, root: Path, family: Any):
        self.root = root
        self.inputs = root / "inputs"
        made = {"base": family.base, **family.sources}  # copied in: the snapshot covers them
        self.base, self.sft, self.rlvr, self.sharded = (
            Path(shutil.copytree(made[k], self.inputs / k)) for k in ("base", "sft", "rlvr", "sharded")
        )
        self.pool = self.inputs / "pool.jsonl"
        self.pool.write_text(
            "".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(6))
        )
        self.work = root / "work"
        self.work.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("DOTS_CACHE", "HF_HUB_CACHE", "TRANSFORMERS_CACHE")}
        subs = (
            ("HOME", "home"),
            ("DOTS_OUTPUTS", "outputs"),
            ("HF_HOME", "hf"),
            ("XDG_CACHE_HOME", "xdg"),
            ("TMPDIR", "tmp"),
        )
        for name, sub in subs:
            (root / sub).mkdir()
            env[name] = str(root / sub)
        io_dir = root.parent / (root.name + "-runner-io")  # the runner's own files: outside the snapshot
        io_dir.mkdir()
        env.update(
            DOTS_PROGRESS="0",
            HF_HUB_OFFLINE="1",
            DOTS_RUNNER_IO=str(io_dir),
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        )
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("cli_runner.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=root,
        )
        assert self.proc.stdout is not None
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}
        self.n = 0

    def run(self, module: str, argv: list[str], timeout: float = 120) -> dict:
        """`python -m module argv` in a fresh working directory; the runner's reply."""
        self.n += 1
        cwd = self.work / str(self.n)
        cwd.mkdir(parents=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"module": module, "argv": argv, "cwd": str(cwd), "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def box(tiny_family, tmp_path_factory):
    sandbox = Sandbox(tmp_path_factory.mktemp("fuzz"), tiny_family("qwen_bf16_and_sharded"))
    yield sandbox
    sandbox.close()
    if COUNTS:
        print(f"\nexamples run per target ({PROFILE}): {json.dumps(COUNTS)}")


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under `root`: files with size and mtime, directories and links by name."""
    out: dict[str, tuple] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            st_ = os.lstat(path)
            out[path] = ("dir",) if name in dirs else (st_.st_size, st_.st_mtime_ns)
    return out


def refused(box: Sandbox, target: str, module: str, argv: list[str], names: list[str]) -> str:
    """Run the command; assert the refusal (exit 2, one `error:` line containing every string of
    `names`, no traceback, the sandbox untouched); return the line."""
    COUNTS[target] = COUNTS.get(target, 0) + 1
    before = snapshot(box.root)
    reply = box.run(module, argv)
    after = snapshot(box.root)
    work = str(box.work / str(box.n))
    before.pop(work, None), after.pop(work, None)  # the runner made it, empty, before the command
    lines = [line for line in reply["stderr"].splitlines() if line.strip()]
    if os.environ.get("DOTS_FUZZ_LOG"):  # one line per example: the long run's record
        with open(os.environ["DOTS_FUZZ_LOG"], "a") as log:
            log.write(
                json.dumps({"target": target, "rc": reply["rc"], "cpu_s": reply["cpu_s"], "first": lines[:1]}) + "\n"
            )
    assert not reply["timed_out"], f"hung: {module} {argv}"
    assert "Traceback" not in reply["stdout"] + reply["stderr"], reply["stderr"][-3000:]
    assert reply["rc"] == 2, (reply["rc"], reply["stderr"][-3000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), reply["stderr"][-3000:]
    for name in names:
        assert name in lines[0], (name, lines[0])
    created = sorted(set(after) - set(before))
    changed = sorted(p for p in before if p in after and before[p] != after[p])
    removed = sorted(set(before) - set(after))
    assert not created and not changed and not removed, (created, changed, removed)
    return lines[0]


def search_argv(
    box: Sandbox, *extra: str, sources: dict[str, Path] | None = None, pool: tuple[str, ...] | None = None
) -> list[str]:
    """A cheap search on the tiny family, which runs to the end on good input (`test_good_inputs_run`)."""
    sources = sources or {"sft": box.sft, "rlvr": box.rlvr}
    return [
        "engine=hf",
        "backbone=custom",
        "backbone.name=tiny",
        f"backbone.base={box.base}",
        "backbone.prompt=plain",
        "backbone.max_tokens=4",
        *[f"+backbone.sources.{k}={v}" for k, v in sources.items()],
        *(pool or ("pool=jsonl", f"pool.path={box.pool}")),
        "selection.strategy=random",  # (balanced filters out every query the tiny models all fail)
        "selection.n=2",
        "selection.m=2",
        "search.n_trials=2",
        "search.k=2",
        f"run_dir={box.work / 'run'}",
        *extra,
    ]


def merge_argv(box: Sandbox, *extra: str, sources: dict[str, Path] | None = None) -> list[str]:
    sources = sources or {"sft": box.sft, "rlvr": box.rlvr}
    return [
        "backbone=custom",
        f"backbone.base={box.base}",
        *[f"+backbone.sources.{k}={v}" for k, v in sources.items()],
        f"output={box.inputs / 'merged'}",  # beside the inputs: their directory is in the snapshot
        *extra,
    ]


def evaluate_argv(box: Sandbox, *extra: str, model: Path | None = None) -> list[str]:
    return [
        "engine=hf",
        "include_backbone=false",
        f"+models.x={model or box.sft}",
        "benchmarks=[lab_add]",
        "limit=2",
        f"output_dir={box.work / 'eval'}",
        *extra,
    ]


def fresh(box: Sandbox, name: str) -> Path:
    """A new path among the inputs (removed first if an earlier example left one)."""
    path = box.inputs / "fuzzed" / name
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    path.parent.mkdir(exist_ok=True)
    return path


# --- the positive control: each command's good input runs ----------------------------------------


def good_parquet(box: Sandbox) -> Path:
    """A parquet pool `pool=parquet` reads (verl's layout: chat messages under `prompt`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = box.inputs / "good.parquet"
    if not path.exists():
        prompts = [[{"role": "user", "content": f"{i}+{i}="}] for i in range(6)]
        pq.write_table(pa.table({"prompt": prompts, "answer": [str(2 * i) for i in range(6)]}), path)
    return path


GOOD = {  # target → (module, argv on good input, the option naming its output)
    "search (jsonl pool, options, checkpoints)": lambda box: ("dots.search", search_argv(box), "run_dir"),
    "search (parquet pool)": lambda box: (
        "dots.search",
        search_argv(box, pool=("pool=parquet", f"pool.path={good_parquet(box)}")),
        "run_dir",
    ),
    "merge (options, checkpoints)": lambda box: (
        "dots.merge",
        merge_argv(box, "method=ties", sources={"sft": box.sharded, "rlvr": box.rlvr}),
        "output",
    ),
    "evaluate (options, checkpoints)": lambda box: ("dots.evaluate", evaluate_argv(box), "output_dir"),
}


@pytest.mark.parametrize("without", ["hydra_plugins"])
def test_the_fuzzers_runner_starts_in_an_install_without_the_extras(tmp_path, without):
    """The positive control of the harness itself (here it starts in `box`): the warm runner
    imports what it preloads and says it is ready where an extra's module is missing (a plain
    `pip install -e .[test]` has no `hydra_plugins`: the fuzzer did not start there)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    if without:  # a module that is not there: importing it raises as a missing one does
        (tmp_path / without).mkdir()
        missing = f"raise ModuleNotFoundError('not installed', name={without!r})\n"
        (tmp_path / without / "__init__.py").write_text(missing)
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    runner = Path(__file__).with_name("cli_runner.py")
    proc = subprocess.run([sys.executable, str(runner)], input="", capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0 and json.loads(proc.stdout.splitlines()[0]) == {"ready": True}, proc.stderr[-3000:]


@pytest.mark.parametrize("target", list(GOOD))
def test_good_inputs_run(box, target):
    """The harness and the argv every bad example is built from run to the end on good input:
    exit 0, no error line, the output made. (Were every input refused, the fuzzer's targets
    would pass; this one would not.)"""
    module, argv, output_option = GOOD[target](box)
    out = box.root / "good" / target.split()[0]
    argv = with_option(argv, output_option, str(out))
    reply = box.run(module, argv, timeout=900)
    assert not reply["timed_out"], f"hung: {module} {argv}"
    assert reply["rc"] == 0, (target, reply["stderr"][-3000:])
    assert "Traceback" not in reply["stderr"] and "error:" not in reply["stderr"], reply["stderr"][-3000:]
    assert out.is_dir() and any(out.iterdir()), out
    shutil.rmtree(out)  # the examples' snapshots start without it


# --- pools -------------------------------------------------------------------------------------------

JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20)
)


def json_containers(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)


JSON_VALUES = st.recursive(JSON_SCALARS, json_containers, max_leaves=12)
NOT_OBJECTS = JSON_VALUES.filter(lambda v: not isinstance(v, dict))
NOT_QUESTIONS = st.one_of(  # what a question key may hold that is not a question's text
    NOT_OBJECTS.filter(lambda v: not (isinstance(v, str) and v.strip()) and not isinstance(v, list)),
    st.lists(st.integers() | st.floats() | st.none(), max_size=3),
    st.lists(
        st.fixed_dictionaries({"role": st.sampled_from(["system", "assistant"]), "content": st.text()}), max_size=3
    ),
    st.dictionaries(st.text(max_size=8), JSON_SCALARS, max_size=3),
)
BAD_UTF8 = st.sampled_from([b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xe2\x82", b"\x80", b"\xf8\x88\x80\x80\x80"])


def good_line(i: int) -> bytes:
    return json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}).encode()


@st.composite
def bad_jsonl_lines(draw) -> bytes:
    """One line a JSONL pool must refuse."""
    kind = draw(st.sampled_from(["not_object", "no_question", "bad_question", "not_utf8", "not_json", "deep", "long"]))
    if kind == "not_object":
        return json.dumps(draw(NOT_OBJECTS)).encode()
    if kind == "no_question":
        record = draw(st.dictionaries(st.text(max_size=8).filter(lambda k: k != "question"), JSON_VALUES, max_size=4))
        return json.dumps(record).encode()
    if kind == "bad_question":
        return json.dumps({"question": draw(NOT_QUESTIONS), "answer": "2"}).encode()
    if kind == "not_utf8":
        line = good_line(0)
        at = draw(st.integers(0, len(line)))
        return line[:at] + draw(BAD_UTF8) + line[at:]
    if kind == "not_json":
        line = good_line(0)
        return line[: draw(st.integers(1, len(line) - 1))]
    if kind == "deep":
        n = draw(st.integers(1_000, 200_000))
        return b"[" * n + b"]" * n
    return b'{"question": "1+1=", "answer": ' + b"7" * draw(st.integers(5_000, 20_000)) + b"}"


@FUZZ
@seed(SEED)
@given(
    before=st.integers(0, 3), blanks=st.lists(st.booleans(), max_size=4), bad=bad_jsonl_lines(), after=st.integers(0, 2)
)
@example(before=2, blanks=[], bad=b"[1, 2]", after=1)  # the record that is not an object
@example(before=3, blanks=[], bad=b'{"q": "1+1=", "answer": "2"}', after=0)  # no configured question key
@example(before=4, blanks=[], bad=b'{"question": "caf\xe9 1+1=", "answer": "2"}', after=0)  # not UTF-8
def test_jsonl_pool(box, before, blanks, bad, after):
    path = fresh(box, "pool.jsonl")
    lines = [good_line(i) for i in range(before)] + [b"" for _ in blanks] + [bad] + [good_line(9)] * after
    path.write_bytes(b"\n".join(lines) + b"\n")
    refused(
        box,
        "jsonl pool",
        "dots.search",
        search_argv(box, pool=("pool=jsonl", f"pool.path={path}")),
        [f"{path}:{before + len(blanks) + 1}"],
    )


@st.composite
def bad_parquet(draw, path: Path) -> list[str]:
    """Write a parquet pool `pool=parquet` must refuse; the strings its error must name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    kind = draw(st.sampled_from(["no_column", "bad_rows", "not_parquet"]))
    n = draw(st.integers(1, 5))
    if kind == "no_column":
        names = draw(
            st.lists(
                st.text(min_size=1, max_size=8).filter(lambda c: c != "prompt"), min_size=1, max_size=3, unique=True
            )
        )
        pq.write_table(pa.table({c: [f"{i}+{i}=" for i in range(n)] for c in names}), path)
        return [str(path), "row 0"]
    if kind == "bad_rows":
        bad_at = draw(st.integers(0, n - 1))
        column = draw(st.sampled_from(["text", "numbers", "messages"]))
        if column == "text":  # a text column with an empty, blank or missing question
            values = [f"{i}+{i}=" for i in range(n)]
            values[bad_at] = draw(st.sampled_from([None, "", "   ", "\n"]))
            bad_at = bad_at
        elif column == "numbers":
            values = draw(st.lists(st.integers(-(2**63), 2**63 - 1) | st.none(), min_size=n, max_size=n))
            bad_at = 0
        else:  # verl's chat messages without a user message
            values = [[{"role": "user", "content": f"{i}+{i}="}] for i in range(n)]
            values[bad_at] = [{"role": draw(st.sampled_from(["system", "assistant"])), "content": "x"}]
        pq.write_table(pa.table({"prompt": values, "answer": [str(i) for i in range(n)]}), path)
        return [str(path), f"row {bad_at}"]
    data = draw(st.binary(min_size=0, max_size=200))
    path.write_bytes(data)
    return [str(path)]


@FUZZ
@seed(SEED)
@given(data=st.data())
@example(data=None)  # the parquet pool without the configured question column
def test_parquet_pool(box, data):
    path = fresh(box, "pool.parquet")
    if data is None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"problem": ["1+1=", "2+2="], "answer": ["2", "4"]}), path)
        names = [str(path), "row 0"]
    else:
        names = data.draw(bad_parquet(path))
    argv = search_argv(box, pool=("pool=parquet", f"pool.path={path}"))
    refused(box, "parquet pool", "dots.search", argv, names)


# --- checkpoints: config.json, safetensors headers, the index ----------------------------------------

VERBS = st.sampled_from(["dots.merge", "dots.search", "dots.evaluate"])


def with_checkpoint(box: Sandbox, verb: str, model: Path) -> list[str]:
    """The command line of `verb` reading `model` (as a source, or as the evaluated model)."""
    if verb == "dots.merge":
        return merge_argv(box, sources={"sft": model, "rlvr": box.rlvr})
    if verb == "dots.search":
        return search_argv(box, sources={"sft": model, "rlvr": box.rlvr})
    return evaluate_argv(box, model=model)


@st.composite
def bad_configs(draw) -> bytes:
    """config.json bytes a reader must refuse."""
    kind = draw(st.sampled_from(["field", "field", "not_object", "not_utf8", "not_json", "deep"]))
    if kind == "field":
        key = draw(st.sampled_from(sorted(CONFIG_FIELDS)))
        what, ok = CONFIG_FIELDS[key]
        value = draw(JSON_VALUES.filter(lambda v: v is not None and not ok(v)))
        return json.dumps({"__field__": [key, value]}).encode()  # filled in by the test (needs the good config)
    if kind == "not_object":
        return json.dumps(draw(NOT_OBJECTS)).encode()
    if kind == "not_utf8":
        return b'{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen' + draw(BAD_UTF8) + b'2"}'
    if kind == "not_json":
        text = b'{"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64}'
        return text[: draw(st.integers(1, len(text) - 1))]
    n = draw(st.integers(1_000, 200_000))
    return b'{"a": ' + b"[" * n + b"]" * n + b"}"


@FUZZ
@seed(SEED)
@given(verb=VERBS, content=bad_configs())
@example(verb="dots.search", content=json.dumps({"__field__": ["hidden_size", "64"]}).encode())  # main ran
@example(verb="dots.merge", content=b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")  # RecursionError on main
def test_config_json(box, verb, content):
    model = fresh(box, "model")
    shutil.copytree(box.sft, model)
    config = model / "config.json"
    if content.startswith(b'{"__field__"'):
        key, value = json.loads(content)["__field__"]
        content = json.dumps({**json.loads(config.read_text()), key: value}).encode()
    config.write_bytes(content)
    refused(box, "config.json", verb, with_checkpoint(box, verb, model), [str(config)])


def _header(file: Path) -> tuple[dict, bytes]:
    raw = file.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + size]), raw[8 + size :]


def _write(file: Path, header_bytes: bytes, data: bytes, size: int | None = None) -> None:
    header_bytes += b" " * (-len(header_bytes) % 8)
    file.write_bytes((len(header_bytes) if size is None else size).to_bytes(8, "little") + header_bytes + data)


NOT_COUNTS = st.one_of(
    st.integers(max_value=-1),
    st.floats(),
    st.text(max_size=4),
    st.booleans(),
    st.none(),
    st.lists(st.integers(0, 3), max_size=2),
)


@st.composite
def bad_headers(draw, file: Path) -> None:
    """Rewrite the safetensors file `file` with a header a reader must refuse."""
    header, data = _header(file)
    names = sorted(n for n in header if n != "__metadata__")
    kind = draw(
        st.sampled_from(["size", "bytes", "not_object", "metadata", "entry", "dtype", "shape", "offsets", "beyond"])
    )
    name = draw(st.sampled_from(names))
    entry = dict(header[name])
    if kind == "size":
        body = json.dumps(header).encode()
        size = draw(
            st.sampled_from([0, len(body) + len(data) + 9, 2**63, 2**64 - 1])
            | st.integers(len(body) + len(data) + 1, 2**40)
        )
        return _write(file, body, data, size)
    if kind == "bytes":
        return _write(
            file,
            draw(st.sampled_from([b"{\xff}", b"{", b"nope", b'{"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"])),
            data,
        )
    if kind == "not_object":
        return _write(file, json.dumps(draw(NOT_OBJECTS)).encode(), data)
    if kind == "metadata":
        header["__metadata__"] = draw(
            NOT_OBJECTS
            | st.dictionaries(
                st.text(max_size=4), JSON_VALUES.filter(lambda v: not isinstance(v, str)), min_size=1, max_size=2
            )
        )
    elif kind == "entry":
        header[name] = draw(NOT_OBJECTS)
    elif kind == "dtype":
        header[name] = {
            **entry,
            "dtype": draw(
                JSON_VALUES.filter(
                    lambda v: (
                        v
                        not in (
                            "F64",
                            "F32",
                            "F16",
                            "BF16",
                            "I64",
                            "I32",
                            "I16",
                            "I8",
                            "U8",
                            "BOOL",
                            "F8_E4M3",
                            "F8_E5M2",
                        )
                    )
                )
            ),
        }
    elif kind == "shape":
        shape = draw(st.lists(NOT_COUNTS | st.integers(0, 10**6), max_size=3) | NOT_OBJECTS)
        if isinstance(shape, list) and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
            if math.prod(shape) == math.prod(entry["shape"]):  # as many entries: a valid header, not a bad one
                shape = [-1]
        header[name] = {**entry, "shape": shape}
    elif kind == "offsets":
        start, end = entry["data_offsets"]
        header[name] = {
            **entry,
            "data_offsets": draw(
                st.sampled_from(
                    [
                        [end, start],
                        [start],
                        [start, end, end],
                        [start, end + 1],
                        [-1, end],
                        [start, float(end)],
                        [str(start), end],
                        None,
                        [start, True],
                    ]
                )
            ),
        }
    else:  # within its size, but past the end of the file
        shift = len(data) + draw(st.integers(1, 2**40))
        header[name] = {**entry, "data_offsets": [entry["data_offsets"][0] + shift, entry["data_offsets"][1] + shift]}
    return _write(file, json.dumps(header).encode(), data)


@st.composite
def bad_indexes(draw, model: Path) -> None:
    """Rewrite `model`'s model.safetensors.index.json into one a reader must refuse."""
    index = model / "model.safetensors.index.json"
    content = json.loads(index.read_text())
    weight_map = content["weight_map"]
    shards = sorted(set(weight_map.values()))
    kind = draw(st.sampled_from(["bytes", "not_object", "no_map", "bad_file", "wrong_shard", "empty"]))
    if kind == "bytes":
        return index.write_bytes(draw(st.sampled_from([b'{"weight_map": {\xff}}', b"{", b"", b"[" * 100_000])))
    if kind == "not_object":
        content = draw(NOT_OBJECTS)
    elif kind == "no_map":
        content = {"metadata": {}, **({"weight_map": draw(NOT_OBJECTS)} if draw(st.booleans()) else {})}
    elif kind == "bad_file":
        name = draw(st.sampled_from(sorted(weight_map)))
        bad = st.sampled_from(
            [
                "../sft/model.safetensors",
                "/etc/passwd",
                "nope.safetensors",
                "sub/x.safetensors",
                "",
                "..",
                "config.json",
            ]
        )
        weight_map[name] = draw(bad | JSON_VALUES.filter(lambda v: not isinstance(v, str)))
    elif kind == "wrong_shard":
        name = draw(st.sampled_from(sorted(weight_map)))
        weight_map[name] = draw(st.sampled_from([s for s in shards if s != weight_map[name]]))
    else:
        content["weight_map"] = {}
    index.write_text(json.dumps(content))


# what is broken -> (the checkpoint its copy starts from, the file the refusal names in the copy,
# the strategy that breaks it)
BROKEN_FILES = {
    "safetensors header": ("sft", "model.safetensors", bad_headers),
    "safetensors index": ("sharded", "", bad_indexes),
}


@pytest.mark.parametrize("target", sorted(BROKEN_FILES))
@FUZZ
@seed(SEED)
@given(verb=VERBS, data=st.data())
def test_broken_weight_files(box, target, verb, data):
    """A safetensors header or a shard index a reader must refuse: refused naming the file (the
    model directory for an index), by every command that reads weights."""
    source, name, breaking = BROKEN_FILES[target]
    model = fresh(box, "model")
    shutil.copytree(getattr(box, source), model)
    named = model / name if name else model
    data.draw(breaking(named))
    refused(box, target, verb, with_checkpoint(box, verb, model), [str(named)])


# --- option values -----------------------------------------------------------------------------------

# option -> its domain: ("int", minimum) | ("float", low, high, low_open, high_open) | ("range",);
# a trailing "null" allows null
INF = float("inf")
SEARCH_OPTIONS = {
    "seed": ("int", -(2**63)),
    "search.n_trials": ("int", 1),
    "search.k": ("int", 1),
    "search.n_startup_trials": ("int", 0),
    "search.temperature": ("float", 0, INF, False, True),
    "search.top_p": ("float", 0, 1, True, False),
    "search.max_tokens": ("int", 1),
    "search.range": ("range",),
    "search.workers": ("int", 1),
    "search.heartbeat_s": ("float", 0, INF, True, True),
    "search.grace_s": ("float", 0, INF, True, True),
    "search.adaptive.first": ("int", 1),
    "search.adaptive.step": ("int", 1),
    "search.adaptive.confidence": ("float", 0.5, 1, False, True),
    "selection.n": ("int", 1),
    "selection.m": ("int", 1),
    "selection.batch": ("int", 1),
    "selection.temperature": ("float", 0, INF, False, True),
    "selection.top_p": ("float", 0, 1, True, False),
    "selection.threshold": ("float", 0, 1, False, False, "null"),
    "selection.easy_fraction": ("float", 0, 1, False, False),
    "sparsify.density": ("float", 0, 1, True, False),
    "backbone.max_tokens": ("int", 1),
    "pool.limit": ("int", 1, "null"),
    "pool.seed": ("int", 0),
    "engine.batch_size": ("int", 1),
    "engine.nll_batch_size": ("int", 1),
    "engine.seed": ("int", 0),
    "search.fixed": ("fixed",),
    "search.granularity": ("choice", "model", "module"),
    "search.answer_mode": ("choice", "math", "choice"),
    "sparsify.scope": ("choice", "tensor", "global"),
    "sparsify.rescale": ("choice", "global", "tensor", "none"),
    "selection.strategy": ("choice", "balanced", "random", "easy", "medium"),
    "selection.source": ("choice", "original", "sparsified"),
    "pick": ("choice", "max_consistency", "knee", "agreement", "smoothed"),
    "confirm.top": ("int", 1),
    "confirm.k": ("int", 1),
    "confirm.queries": ("choice", "selection", "held_out"),
    "engine.synth_cache": ("choice", "auto", "memory", "disk"),
    "engine.resident_form": ("choice", "auto", "dense", "sparse", "index", "bitmask"),
    "engine.dtype": ("choice", "auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16", "half", "float"),
    "pool.question_key": ("text",),
}
MERGE_OPTIONS = {  # (method, option) -> domain
    ("ties", "method.density"): ("float", 0, 1, True, False),
    ("ties", "method.scale"): ("float", -INF, INF, True, True),
    ("task_arithmetic", "method.scale"): ("float", -INF, INF, True, True),
    ("task_arithmetic", "method.weights"): ("float", -INF, INF, True, True),
    ("dare_ties", "method.p"): ("float", 0, 1, False, True),
    ("dare_linear", "method.seed"): ("int", 0),
    ("ram", "method.epsilon"): ("float", 0, INF, False, True),
    ("ram_plus", "method.r"): ("float", 0, INF, False, True),
    ("ram_plus", "method.alpha"): ("float", 0, INF, False, True),
    ("sar", "method.calibration_size"): ("int", 1),
    ("sar", "method.max_new_tokens"): ("int", 1),
    ("sar", "method.epsilon"): ("float", 0, INF, False, True),
    ("dots_fixed", "method.density"): ("float", 0, 1, True, False),
    ("ties", "max_shard_bytes"): ("int", 1),
    ("ties", "block_entries"): ("int", 1),
    ("dare_ties", "method.combine"): ("choice", "linear", "ties"),
    ("ram", "method.scope"): ("choice", "global", "tensor"),
    ("sar", "method.fisher_dtype"): ("choice", "float32", "bfloat16", "float16", "float64"),
    ("dots_fixed", "method.rescale"): ("choice", "global", "tensor", "none"),
}
EVALUATE_OPTIONS = {
    "limit": ("int", 1, "null"),
    "max_tokens": ("int", 1, "null"),
    "chunk": ("int", 1),
    "seed": ("int", -(2**63)),
    "engine.batch_size": ("int", 1),
    "engine.nll_batch_size": ("int", 1),
}
WORDS = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(
    lambda w: w not in ("nan", "inf", "null", "true", "false") and not w.startswith("_")
)


def hydra_value(value: object) -> str:
    """`value` written as a Hydra override value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (INF, -INF):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return repr(value) if isinstance(value, float) else str(value)


@st.composite
def bad_values(draw, domain: tuple) -> str:
    """A value outside `domain`, as a Hydra override value."""
    kind, *rest = domain
    nonfinite = st.sampled_from(["nan", "inf", "-inf"])
    wrong_type = WORDS | st.just("true") | st.just("[1,2,3]") | st.just("{a: 1}")
    if kind == "choice":  # a word, a number or a list that is none of the choices
        return draw(
            st.one_of(WORDS.filter(lambda w: w not in rest), st.integers().map(str), nonfinite, st.just("[1,2,3]"))
        )
    if kind == "text":
        return draw(st.one_of(st.integers().map(str), nonfinite, st.just("[1,2,3]"), st.just("{a: 1}"), st.just("''")))
    if kind == "fixed":  # search.fixed for 2 sources in search.range [0, 2]
        point = st.lists(st.floats(0, 2), min_size=2, max_size=2)
        return draw(
            st.one_of(
                WORDS,
                st.integers().map(str),
                st.lists(point, min_size=1, max_size=2).map(lambda ps: hydra_value([[*p[:1], INF] for p in ps])),
                st.lists(point, min_size=1, max_size=2).map(
                    lambda ps: hydra_value([[*p[:1], float("nan")] for p in ps])
                ),
                st.lists(st.floats(0, 2), min_size=1, max_size=5)
                .filter(lambda v: len(v) != 2)
                .map(lambda v: hydra_value([v])),
                st.floats(2.001, 1e9).map(lambda v: hydra_value([[1.0, v]])),
                st.floats(-1e9, -0.001).map(lambda v: hydra_value([[v, 1.0]])),
                WORDS.map(lambda w: f"[{w}]"),
                WORDS.map(lambda w: f"[[1,{w}]]"),
            )
        )
    if kind == "range":
        low = st.floats(0, 10)
        return draw(
            st.one_of(
                st.tuples(low, nonfinite).map(lambda t: f"[{t[0]},{t[1]}]"),
                st.tuples(nonfinite, low).map(lambda t: f"[{t[0]},{t[1]}]"),
                st.tuples(low, low).filter(lambda t: t[1] <= t[0]).map(lambda t: f"[{t[0]},{t[1]}]"),
                st.floats(-10, -0.001).map(lambda v: f"[{v},1]"),
                st.lists(st.floats(0, 2), max_size=4).filter(lambda v: len(v) != 2).map(hydra_value),
                wrong_type,
            )
        )
    if kind == "int":
        minimum = rest[0]
        below = st.integers(-(10**6), minimum - 1).map(str) if minimum > -(2**63) else st.nothing()
        fraction = st.floats(-1e6, 1e6).filter(lambda v: v != int(v)).map(repr)
        return draw(st.one_of(nonfinite, wrong_type, below, fraction))
    low, high, low_open, high_open = rest[:4]
    outside = st.nothing()
    if low > -INF:
        outside |= st.floats(max_value=low, exclude_max=not low_open, allow_infinity=False).map(repr)
    if high < INF:
        outside |= st.floats(min_value=high, exclude_min=not high_open, allow_infinity=False).map(repr)
    return draw(st.one_of(nonfinite, wrong_type, outside))


def with_option(argv: list[str], option: str, value: str) -> list[str]:
    """`argv` with `option=value` in place of any value it gave the option."""
    return [a for a in argv if a.split("=", 1)[0] != option] + [f"{option}={value}"]


# the cases and the defects found on main, kept: (option, value)
SEARCH_CASES = [
    ("search.range", "[0,nan]"),  # the issue's: ran 5 minutes and left a run directory
    ("search.range", "[0,inf]"),
    ("search.n_trials", "inf"),
    ("search.temperature", "inf"),  # accepted on main: the search ran
    ("search.fixed", "[abc]"),  # a traceback on main
    ("pool.limit", "nan"),  # a traceback on main
]
MERGE_CASES = [
    ("ties", "method.scale", "nan"),  # main wrote a NaN model, exit 0
    ("task_arithmetic", "method.weights", "abc"),  # a traceback on main
    ("sar", "method.fisher_dtype", "abc"),  # a traceback on main, mid-merge
    # found by the long run of 2026-11-28 (seed 20261128): refused, but the line named only the leaf
    ("dare_ties", "method.p", "-1.0"),
    ("task_arithmetic", "method.weights", "[1,2,3]"),
    ("ties", "method.density", "0.0"),
]
EVALUATE_CASES = [
    ("seed", "abc"),  # a traceback on main, after the evaluation directory was written
    ("max_tokens", "inf"),  # a traceback on main
]


def refused_search_option(box: Sandbox, option: str, value: str) -> None:
    refused(box, "search options", "dots.search", with_option(search_argv(box), option, value), [option])


def refused_merge_option(box: Sandbox, method: str, option: str, value: str) -> None:
    argv = merge_argv(box, f"method={method}", f"{option}={value}", sources={"sft": box.sft, "rlvr": box.rlvr})
    refused(box, "merge options", "dots.merge", argv, [option])


def refused_evaluate_option(box: Sandbox, option: str, value: str) -> None:
    refused(box, "evaluate options", "dots.evaluate", with_option(evaluate_argv(box), option, value), [option])


# command -> (its options' domains, the kept cases, the refusal of a bad value: (box, *where, value),
# where an option's name, or for merge its method and name)
COMMAND_OPTIONS = {
    "search": (SEARCH_OPTIONS, SEARCH_CASES, refused_search_option),
    "merge": (MERGE_OPTIONS, MERGE_CASES, refused_merge_option),
    "evaluate": (EVALUATE_OPTIONS, EVALUATE_CASES, refused_evaluate_option),
}


def where(key: str | tuple[str, ...]) -> tuple[str, ...]:
    """An option's key in its table as the refusal's arguments (merge's keys are (method, option))."""
    return key if isinstance(key, tuple) else (key,)


@pytest.mark.parametrize(
    "command,key",
    [(command, key) for command, (options, _, _) in COMMAND_OPTIONS.items() for key in sorted(options)],
    ids=lambda value: ":".join(where(value)),
)
@OPTION_FUZZ
@seed(SEED)
@given(data=st.data())
def test_command_options(box, command, key, data):
    """Every option of `dots.search`, `dots.merge` (per method) and `dots.evaluate` at least once
    per run: a bad value is refused naming it."""
    options, _, refuse = COMMAND_OPTIONS[command]
    refuse(box, *where(key), data.draw(bad_values(options[key]), label="value"))


@pytest.mark.parametrize(
    "command,case",
    [(command, case) for command, (_, cases, _) in COMMAND_OPTIONS.items() for case in cases],
    ids=lambda value: "=".join(where(value)),
)
def test_command_option_cases(box, command, case):
    COMMAND_OPTIONS[command][2](box, *case)


# --- inputs against each other (issue #39) -----------------------------------------------------------


@st.composite
def contradicting_files(draw, model: Path) -> Path:
    """Rewrite one file of `model` (a copy of the sandbox's SFT checkpoint) so that it is well
    formed alone but contradicts the others; the file the refusal must name."""
    config_file, tokenizer = model / "config.json", model / "tokenizer.json"
    config = json.loads(config_file.read_text())
    kind = draw(
        st.sampled_from(
            ["hidden_size", "vocab_size", "layers", "bias", "llama", "tokenizer", "tokenizer_json", "tok_cfg"]
        )
    )
    if kind in ("hidden_size", "vocab_size", "layers"):
        key = {"layers": "num_hidden_layers"}.get(kind, kind)
        config[key] = draw(st.integers(1, 10_000).filter(lambda n: n != config[key]))
    elif kind == "bias":  # Qwen2 weights hold q/k/v biases
        config["attention_bias"] = False
    elif kind == "llama":
        config.update(architectures=["LlamaForCausalLM"], model_type=draw(st.sampled_from(["llama", "mistral"])))
        config.pop("attention_bias", None)
    if kind in ("hidden_size", "vocab_size", "layers", "bias", "llama"):
        config_file.write_text(json.dumps(config))
        return config_file
    if kind == "tokenizer":  # cut short, or bytes that are not a tokenizer
        text = tokenizer.read_bytes()
        tokenizer.write_bytes(draw(st.sampled_from([text[: draw(st.integers(0, len(text) - 2))], b"\xff\xfe"])))
        return tokenizer
    if kind == "tokenizer_json":  # JSON, but not a tokenizer
        tokenizer.write_text(
            json.dumps(draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict) or "model" not in v)))
        )
        return tokenizer
    file = model / "tokenizer_config.json"
    text = file.read_bytes()
    file.write_bytes(text[: draw(st.integers(0, len(text) - 2))])
    return file


@FUZZ
@seed(SEED)
@given(verb=VERBS, data=st.data())
@example(verb="dots.merge", data="llama")  # the issue's: a Llama config.json on Qwen2 weights merged, exit 0
@example(verb="dots.search", data="hidden_size")  # the issue's: a traceback after the run directory was made
def test_contradicting_files(box, verb, data):
    model = fresh(box, "model")
    shutil.copytree(box.sft, model)
    if isinstance(data, str):
        file = model / "config.json"
        config = json.loads(file.read_text())
        if data == "llama":
            config.update(architectures=["LlamaForCausalLM"], model_type="llama", attention_bias=False)
        else:
            config["hidden_size"] = 128
        file.write_text(json.dumps(config))
    else:
        file = data.draw(contradicting_files(model))
    refused(box, "contradicting files", verb, with_checkpoint(box, verb, model), [str(file)])


def symlink_loop(box: Sandbox, links: int) -> Path:
    """A loop of `links` symbolic links among the inputs (1: a link to itself); its first link."""
    first = fresh(box, "loop0")
    names = [first] + [fresh(box, f"loop{i}") for i in range(1, links)]
    for name in names:  # a loop an earlier example left (`fresh` sees no file there)
        if os.path.lexists(name):
            os.unlink(name)
    for i, name in enumerate(names):
        os.symlink(names[(i + 1) % links], name)
    return first


DESTINATIONS = {  # writer -> (command, the option naming its destination)
    "merge output": ("dots.merge", "output"),
    "search run_dir": ("dots.search", "run_dir"),
    "search export.dir": ("dots.search", "export.dir"),
    "search cache_dir": ("dots.search", "cache_dir"),
    "evaluate output_dir": ("dots.evaluate", "output_dir"),
    "analyze output": ("dots.analyze", "output"),
}


def analyze_argv(box: Sandbox, *extra: str) -> list[str]:
    return [
        "backbone=custom",
        f"backbone.base={box.base}",
        f"+backbone.sources.sft={box.sft}",
        f"+backbone.sources.rlvr={box.rlvr}",
        f"output={box.work / 'analysis'}",
        *extra,
    ]


def writer_argv(box: Sandbox, verb: str, *extra: str) -> list[str]:
    build = {"dots.merge": merge_argv, "dots.search": search_argv, "dots.evaluate": evaluate_argv}
    return build.get(verb, analyze_argv)(box, *extra)  # type: ignore[operator]


@FUZZ
@seed(SEED)
@given(writer=st.sampled_from(sorted(DESTINATIONS)), links=st.integers(1, 3), below=st.booleans())
@example(writer="merge output", links=2, below=False)  # the issue's: RuntimeError: Symlink loop, every writer
def test_symlink_loop_destination(box, writer, links, below):
    verb, option = DESTINATIONS[writer]
    loop = symlink_loop(box, links)
    where = loop / "out" if below else loop
    argv = with_option(writer_argv(box, verb), option, str(where))
    refused(box, "symlink loop", verb, argv, [str(loop), "loop of symbolic links"])


SEARCH_PLACES = ("run_dir", "export.dir", "cache_dir")


@FUZZ
@seed(SEED)
@given(data=st.data())
@example(data=("export.dir", "run_dir", False))  # the issue's: the whole search ran, then refused
@example(data=("cache_dir", "run_dir", False))  # the issue's: refused after making the run dir
@example(data=("cache_dir", "output", False))  # the issue's: dots.merge merged, then blamed its .lock
def test_equal_destinations(box, data):
    if isinstance(data, tuple):
        first, second, nested = data
    else:
        first, second = data.draw(
            st.sampled_from(
                [(a, b) for a in SEARCH_PLACES for b in SEARCH_PLACES if a != b] + [("cache_dir", "output")]
            )
        )
        nested = data.draw(st.booleans()) and (second in ("export.dir", "cache_dir", "output"))
    outer = box.work / "shared"
    inner = outer / "inner" if nested else outer  # `first` inside `second` (whole or a cache), or the same
    if second == "output" or first == "output":
        argv = with_option(with_option(merge_argv(box), second, str(outer)), first, str(inner))
        verb = "dots.merge"
    else:
        argv = with_option(with_option(search_argv(box), second, str(outer)), first, str(inner))
        verb = "dots.search"
    refused(box, "equal destinations", verb, argv, [str(outer)])


PLAN_OPTIONS = {"--device-memory-gb": ("float", 0, INF, True, True)}
DOCTOR_OPTIONS = {"--layers": ("int", 1)}


def lab_options() -> dict[str, tuple]:
    """Every number of conf/lab.yaml with its domain (dots.lab.config.check_ranges)."""
    from omegaconf import OmegaConf

    from dots.lab.config import CONF_PATH, FRACTIONS, MAY_BE_ZERO

    out: dict[str, tuple] = {}

    def walk(node, prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict):
                walk(value, f"{name}.")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                low, low_open = 0, key not in MAY_BE_ZERO
                high = 1 if key in FRACTIONS else INF
                out[name] = (
                    ("int", 0 if not low_open else 1)
                    if isinstance(value, int)
                    else ("float", low, high, low_open, high == INF)
                )

    walk(OmegaConf.to_container(OmegaConf.load(CONF_PATH)), "")
    return out


LAB_OPTIONS = lab_options()


@FUZZ
@seed(SEED)
@given(data=st.data())
@example(data=("dots.plan", "--device-memory-gb", "nan"))  # the issue's: accepted
@example(data=("dots.plan", "--device-memory-gb", "-8"))  # the issue's: accepted
@example(data=("dots.doctor", "--layers", "-1"))  # the issue's: a traceback
@example(data=("dots.lab", "base.steps", "0"))  # the issue's: ZeroDivisionError
def test_plan_doctor_lab_numbers(box, data):
    if isinstance(data, tuple):
        verb, option, value = data
    else:
        verb = data.draw(st.sampled_from(["dots.plan", "dots.doctor", "dots.lab"]), label="verb")
        table = {"dots.plan": PLAN_OPTIONS, "dots.doctor": DOCTOR_OPTIONS, "dots.lab": LAB_OPTIONS}[verb]
        option = data.draw(st.sampled_from(sorted(table)), label="option")
        value = data.draw(bad_values(table[option]), label="value")
    if verb == "dots.lab":
        argv = [f"{option}={value}", "eval.enabled=false"]
    else:
        argv = [f"{option}={value}", "backbone=custom", f"backbone.base={box.base}", f"+backbone.sources.sft={box.sft}"]
    refused(box, f"{verb[5:]} numbers", verb, argv, [option])
