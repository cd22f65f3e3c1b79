"""The lab: tasks and splits, the trio builder (tiny config), its cache, the sampler and the scorer."""

from __future__ import annotations

import json
import random

import pytest
import torch
from omegaconf import OmegaConf

from dots.errors import DotsError
from dots.lab import tasks as T
from dots.scoring.sampling import Sampling

# A trio small enough to train in a few seconds (head_dim stays 32).
TINY = [
    "model.hidden_size=64",
    "model.num_attention_heads=2",
    "model.num_key_value_heads=1",
    "model.intermediate_size=64",
    "model.num_hidden_layers=1",
    "base.steps=4",
    "base.batch_size=8",
    "base.warmup=1",
    "sft.examples=16",
    "sft.epochs=1",
    "sft.batch_size=8",
    "rlvr.steps=2",
    "rlvr.prompts_per_step=2",
    "rlvr.samples_per_prompt=4",
    "tasks.test_per_skill=64",
    "tasks.pool_per_skill=32",
    "eval.per_skill=4",
    "eval.samples=2",
]
TASKS = {
    "split_seed": 0,
    "test_per_skill": 64,
    "pool_per_skill": 32,
    "slip_rate": 0.7,
    "digits": [1, 2, 3],
    "two_digit_share": 0.4,
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lab-outputs")
    mp = pytest.MonkeyPatch()
    mp.setenv("DOTS_OUTPUTS", str(root))
    yield root
    mp.undo()


@pytest.fixture(scope="module")
def trio(outputs):
    from dots.lab import ensure_trio

    return ensure_trio(TINY)


# ------------------------------------------------------------------ tasks
def test_splits_are_disjoint_and_sized():
    for skill in T.SKILLS:
        s = T.split_problems(TASKS, skill)
        keys = {k: {(p.a, p.b) for p in v} for k, v in s.items()}
        assert len(keys["test"]) == 64 and len(keys["pool"]) == 32
        assert not keys["test"] & keys["pool"] and not keys["test"] & keys["train"] and not keys["pool"] & keys["train"]
        assert sum(map(len, keys.values())) == (8100 if skill == "add" else 4095)
        assert all(10 <= p.a <= 99 and 10 <= p.b <= 99 for v in s.values() for p in v)
    assert T.split_problems(TASKS, "add")["test"] == T.split_problems(TASKS, "add")["test"]
    other = T.split_problems({**TASKS, "split_seed": 1}, "add")["test"]
    assert other != T.split_problems(TASKS, "add")["test"]


def test_record_answers_are_correct():
    recs = T.records(TASKS, "test")
    assert len(recs) == 128 and {r["skill"] for r in recs} == {"add", "sub"}
    assert len({r["id"] for r in recs}) == len(recs)
    for r in recs:
        q = r["question"]
        assert q.endswith("=")
        a, op, b = q[:-1].partition("+") if r["skill"] == "add" else q[:-1].partition("-")
        assert int(r["answer"]) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert T.extract_answer(T.completion(int(r["answer"]))) == int(r["answer"])


def test_worked_solutions_are_right_and_slips_forget_the_carry():
    assert T.solution(T.Problem(47, 38, "add")) == "7+8=15 4+3+1=8 \\boxed{85}"
    assert T.solution(T.Problem(42, 38, "sub")) == "12-8=4 4-1-3=0 \\boxed{4}"
    assert T.solution(T.Problem(47, 38, "add"), lambda col: True) == "7+8=15 4+3=7 \\boxed{75}"
    assert T.solution(T.Problem(402, 38, "sub")) == "12-8=4 10-1-3=6 4-1-0=3 \\boxed{364}"
    for a in range(0, 1000, 7):
        for b in range(0, 1000, 11):
            for skill in T.SKILLS:
                if skill == "add" or a >= b:
                    p = T.Problem(a, b, skill)
                    text = T.solution(p)
                    assert T.extract_answer(text) == p.answer, text


def test_slip_is_the_forgotten_carry_or_borrow():
    assert T.Problem(47, 38, "add").slipped_answer == 75
    assert T.Problem(42, 38, "sub").slipped_answer == 14
    assert T.Problem(41, 38, "add").slipped_answer == 79  # no carry: no slip
    train = {s: T.split_problems(TASKS, s)["train"] for s in T.SKILLS}
    for rate, expect_wrong in ((0.0, False), (1.0, True)):
        texts = T.pretraining_batch(random.Random(0), {**TASKS, "slip_rate": rate}, train, 400)
        for text in texts:
            q, _, c = text.partition("=")
            skill = "add" if "+" in q else "sub"
            a, _, b = q.partition(T.OPS[skill])
            p = T.Problem(int(a), int(b), skill)
            got = T.extract_answer(c)
            assert got == (p.slipped_answer if expect_wrong else p.answer)
    two_digit_test = {p.prompt for s in T.SKILLS for p in T.split_problems(TASKS, s)["test"]}
    assert not two_digit_test & {t.partition("=")[0] + "=" for t in texts}


def test_extract_answer():
    assert T.extract_answer("\\boxed{12} then \\boxed{-7}") == -7
    assert T.extract_answer("\\boxed{ 42 }") == 42
    assert T.extract_answer("no box 42") is None
    assert T.extract_answer("\\boxed{4a}") is None
    assert T.extract_answer("\\boxed{12") is None


def test_tokenizer_round_trips_prompts():
    from dots.lab.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    for r in T.records(TASKS, "pool")[:20]:
        skill = r["skill"]
        a, _, b = r["question"][:-1].partition(T.OPS[skill])
        text = r["question"] + T.solution(T.Problem(int(a), int(b), skill))
        ids = tok(text)["input_ids"]
        assert len(ids) == len(text) and tok.unk_token_id not in ids
        assert tok.decode(ids) == text


def test_pool_queries_are_lab_prompts_disjoint_from_test():
    pool = T.pool_queries({"kind": "lab", "split": "pool", "size": 100})
    test = T.test_problems({"size": 2048})
    assert len(pool) == 100 and len(test) == 2048
    assert set(pool[0]) == {"id", "question", "answer", "skill"}
    assert {q["skill"] for q in pool} == {"add", "sub"}
    assert not {q["question"] for q in pool} & {q["question"] for q in test}
    only_sub = T.pool_queries({"split": "pool", "size": 10, "skills": ["sub"]})
    assert {q["skill"] for q in only_sub} == {"sub"}


# ------------------------------------------------------------------ config
def test_bad_overrides_are_one_line_errors():
    from dots.lab.config import load_config

    with pytest.raises(DotsError, match="not in struct"):
        load_config(["base.stepz=3"])
    with pytest.raises(DotsError, match="head_dim"):
        load_config(["model.num_attention_heads=8"])
    with pytest.raises(DotsError, match="must be a number"):
        load_config(["base.steps=many"])
    with pytest.raises(DotsError, match="key=value"):
        load_config(["seed"])


def test_stage_keys_follow_their_sections():
    from dots.lab.config import load_config, stage_key

    a, b = load_config(), load_config(["rlvr.lr=1e-6"])
    assert stage_key(a, "base") == stage_key(b, "base") and stage_key(a, "sft") == stage_key(b, "sft")
    assert stage_key(a, "rlvr") != stage_key(b, "rlvr")


# ------------------------------------------------------------------ the trio
def test_trio_is_real_hf_checkpoints(trio):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dots.io.checkpoint import Checkpoint

    assert set(trio) == {"base", "sft", "rlvr"}
    for stage, path in trio.items():
        ckpt = Checkpoint(path)
        assert ckpt.architecture == "Qwen2ForCausalLM"
        assert all(ckpt.info(n).dtype == torch.bfloat16 for n in ckpt.names)
        cfg = ckpt.config
        assert cfg["hidden_size"] // cfg["num_attention_heads"] >= 32
        model = AutoModelForCausalLM.from_pretrained(path)
        tok = AutoTokenizer.from_pretrained(path)
        assert tok.decode(tok("47+38=")["input_ids"]) == "47+38="
        assert model.config.eos_token_id == tok.eos_token_id
        assert json.loads((path / "lab.json").read_text())["stage"] == stage
    base, sft, rlvr = (Checkpoint(trio[k]) for k in ("base", "sft", "rlvr"))
    assert any(not torch.equal(base.get(n), sft.get(n)) for n in base.names)
    # A 4-step base never earns a reward, so GRPO has no signal: RLVR must equal the base exactly
    # (no weight decay, no KL drift), which also shows SFT and RLVR both start from the stored base.
    metrics = json.loads((trio["rlvr"] / "lab.json").read_text())["metrics"]
    assert metrics["reward_first"] == metrics["reward_last"] == 0.0
    assert all(torch.equal(base.get(n), rlvr.get(n)) for n in base.names)


def test_group_advantages():
    from dots.lab.train import group_advantages

    adv = group_advantages(torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1]), group=4)
    assert torch.equal(adv[4:], torch.zeros(4))  # all-equal group: no signal
    assert adv[:4].sum().abs() < 1e-6 and adv[0] > 0 > adv[1]
    assert adv[:4].pow(2).mean() == pytest.approx(1.0, abs=1e-4)


def test_second_call_reuses_the_cache(trio, monkeypatch):
    import dots.lab.build as build
    from dots.lab import ensure_trio

    def no_training(*a, **k):
        raise AssertionError("retrained a cached stage")

    monkeypatch.setattr(build, "_train_stage", no_training)
    assert ensure_trio(TINY) == trio


def test_same_seed_same_weights_other_seed_differs(trio, tmp_path, monkeypatch):
    from dots.io.checkpoint import Checkpoint
    from dots.lab import ensure_trio

    monkeypatch.setenv("DOTS_OUTPUTS", str(tmp_path / "again"))
    again = ensure_trio(TINY)
    assert again["rlvr"] != trio["rlvr"]  # really rebuilt elsewhere
    for stage in trio:
        a, b = Checkpoint(trio[stage]), Checkpoint(again[stage])
        assert all(torch.equal(a.get(n), b.get(n)) for n in a.names), stage
    monkeypatch.setenv("DOTS_OUTPUTS", str(tmp_path / "seed1"))
    other = ensure_trio(TINY + ["seed=1", "eval.enabled=false"])
    a, b = Checkpoint(trio["base"]), Checkpoint(other["base"])
    assert any(not torch.equal(a.get(n), b.get(n)) for n in a.names)


def test_rlvr_only_config_change_keeps_base_and_sft(trio, monkeypatch):
    import dots.lab.build as build
    from dots.lab import ensure_trio

    trained = []
    real = build._train_stage
    monkeypatch.setattr(build, "_train_stage", lambda cfg, stage, base: trained.append(stage) or real(cfg, stage, base))
    new = ensure_trio(TINY + ["rlvr.lr=1e-4"])
    assert trained == ["rlvr"]
    assert new["base"] == trio["base"] and new["sft"] == trio["sft"] and new["rlvr"] != trio["rlvr"]


def test_resolver_points_configs_at_the_trio(trio):
    import dots.options.compose  # noqa: F401  (registers ${lab:...})

    args = ",".join(f"'{o}'" for o in TINY)  # OmegaConf needs `key=value` arguments quoted
    cfg = OmegaConf.create({"base": "${lab:base," + args + "}", "sources": {"rlvr": "${lab:rlvr," + args + "}"}})
    assert cfg.base == str(trio["base"]) and cfg.sources.rlvr == str(trio["rlvr"])
    with pytest.raises(Exception, match="no stage"):
        _ = OmegaConf.create({"x": "${lab:merged," + args + "}"}).x


def test_backbone_and_pool_configs():
    from dots.paths import CONF_DIR

    backbone = OmegaConf.load(CONF_DIR / "backbone/lab.yaml").backbone
    keys = set(backbone.keys())  # (`key in cfg` would resolve ${lab:...}, i.e. build the real trio)
    assert {"name", "base", "revision", "sources", "prompt", "max_tokens", "pick", "config_from", "test_set"} <= keys
    assert OmegaConf.to_container(backbone)["base"] == "${lab:base}"
    assert backbone.prompt == "plain" and backbone.revision is None and set(backbone.sources) == {"sft", "rlvr"}
    test = T.test_problems(backbone.test_set)
    assert len(test) == backbone.test_set.size
    pool_cfg = OmegaConf.load(CONF_DIR / "pool/lab.yaml")
    assert pool_cfg.kind == "lab" and len(T.pool_queries(pool_cfg)) == pool_cfg.size


# ------------------------------------------------------------------ sampler and scorer
def test_local_sampler_matches_transformers_greedy(trio):
    from transformers import AutoModelForCausalLM

    from dots.lab.sampling import LocalEngine, encode

    engine = LocalEngine(trio["sft"])
    prompts = ["5+3=", "47+38=", "100-7=", "9-9="]  # different lengths: left padding in one batch
    ours = engine.generate(prompts, Sampling(n=1, temperature=0.0, max_tokens=10))
    model = AutoModelForCausalLM.from_pretrained(trio["sft"], dtype=torch.float32)
    for prompt, [text] in zip(prompts, ours):
        ids = torch.tensor(encode(engine.tok, [prompt]))
        ref = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=10,
            do_sample=False,
            eos_token_id=engine.tok.eos_token_id,
            pad_token_id=engine.tok.pad_token_id,
        )
        assert text == engine.tok.decode(ref[0, ids.shape[1] :], skip_special_tokens=True)


def test_sampling_is_seeded(trio):
    from dots.lab.sampling import LocalEngine

    engine = LocalEngine(trio["base"])
    a = engine.generate(["12+34="] * 3, Sampling(n=4, temperature=1.0, max_tokens=8, seed=3))
    b = engine.generate(["12+34="] * 3, Sampling(n=4, temperature=1.0, max_tokens=8, seed=3))
    assert a == b and len(a) == 3 and all(len(x) == 4 for x in a)


class AnswerBook:
    """An Engine whose answers are known: right on addition, `wrong_sub` on subtraction."""

    def __init__(self, sub_answers):
        self.sub_answers = sub_answers

    def generate(self, prompts, sampling=Sampling()):
        n, out = sampling.n, []
        for p in prompts:
            a, op, b = p[:-1].partition("+") if "+" in p else p[:-1].partition("-")
            if op == "+":
                out.append([f"\\boxed{{{int(a) + int(b)}}}"] * n)
            else:
                out.append([self.sub_answers(int(a) - int(b), i) for i in range(n)])
        return out


def test_scorer_counts_right_answers_and_consistency():
    from dots.lab.score import accuracy
    from dots.scoring import consistency_of_labels as consistency

    probs = T.records(TASKS, "test", size=40)
    # subtraction: sample 0 right, 1 wrong, 2 no answer, 3 right -> accuracy 0.5, consistency 0.5
    book = AnswerBook(
        lambda ans, i: [f"\\boxed{{{ans}}}", f"\\boxed{{{ans + 1}}}", "no idea", f"x \\boxed{{{ans}}}"][i]
    )
    res = accuracy(book, probs, n=4, temperature=0.6)
    assert res["add"] == 1.0 and res["sub"] == 0.5 and res["all"] == 0.75
    assert res["consistency"] == pytest.approx((1.0 + 0.5) / 2)
    assert res["problems"] == 40 and res["samples"] == 4
    assert consistency([None, None]) == 0.0 and consistency([3, None, None]) == 1 / 3


def test_scorer_on_a_built_model_agrees_with_its_generations(trio):
    from dots.lab.sampling import LocalEngine
    from dots.lab.score import accuracy

    engine = LocalEngine(trio["sft"])
    probs = T.records(TASKS, "test", size=16)
    res = accuracy(engine, probs, n=1, details=True)
    manual = sum(T.extract_answer(r["samples"][0]) == r["answer"] for r in res["rows"]) / len(probs)
    assert res["all"] == manual and 0.0 <= res["all"] <= 1.0


def test_cli_prints_paths_and_accuracy(trio, capsys):
    from dots.lab.__main__ import main

    main(TINY)
    out = capsys.readouterr().out
    assert str(trio["rlvr"]) in out and "B greedy" in out


def test_cli_bad_override_exits_2(capsys):
    from dots.lab.__main__ import main

    with pytest.raises(SystemExit) as exc:
        main(["base.nope=1"])
    assert exc.value.code == 2 and "error:" in capsys.readouterr().err
