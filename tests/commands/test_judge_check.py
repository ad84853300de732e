"""``scaling-grader judge-check`` and ``exam-summary`` against a real fake endpoint and the real bank."""

from __future__ import annotations

import argparse

import pytest

from app.commands import exam_summary as exam_command
from app.commands import judge_check
from app.settings import Settings, get_settings
from app.tasks.exam.bank import build_tasks
from tests.support.book_mirror import mirror_path


def parser_for(module) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scaling-grader")
    module.register(parser.add_subparsers(dest="command", required=True))
    return parser


@pytest.fixture
def book_env(monkeypatch, tmp_path, fresh_registry):
    monkeypatch.setenv("SCALING_GRADER_BOOK_MIRROR", str(mirror_path()))
    monkeypatch.setenv("SCALING_GRADER_BOOK_CACHE", str(tmp_path))
    monkeypatch.delenv("SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture(scope="module")
def judge_tasks():
    tasks = build_tasks(Settings(book_mirror=mirror_path()))
    return [t for t in tasks if t.grading == "judge"]


def test_matching_judge_agrees_fully(fake, judge_tasks):
    report = judge_check.run_check(Settings(), judge_tasks[:10], model="judge-match", base_url=fake.base_url)
    assert report["positives"] == 10 and report["positives_yes"] == 10
    assert report["negatives"] == 10 and report["negatives_no"] == 10
    assert report["agreement"] == 1.0 and report["errors"] == 0
    # every request carried the resolved book passage as context
    assert all("Source passage" in r.body["messages"][1]["content"] for r in fake.requests)


def test_yes_sayer_is_caught_by_the_negative_control(fake, judge_tasks):
    report = judge_check.run_check(Settings(), judge_tasks[:6], model="judge-yes", base_url=fake.base_url)
    assert report["agreement"] == 0.5 and report["negatives_no"] == 0


def test_negatives_come_from_other_chapters(judge_tasks):
    cases = judge_check.check_cases(judge_tasks, negatives=True)
    by_gold = {t.gold: t for t in judge_tasks}
    for task, completion, expected in cases:
        if not expected:
            assert by_gold[completion].chapter != task.chapter


def test_cli_reports_agreement(fake, book_env, capsys):
    args = parser_for(judge_check).parse_args(
        ["judge-check", "--model", "judge-match", "--base-url", fake.base_url, "--limit", "5"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "agreement: 100.0% of 10 scored cases" in out
    assert "references judged correct:   5/5" in out


def test_cli_fails_below_min_agreement(fake, book_env, capsys):
    args = parser_for(judge_check).parse_args(
        ["judge-check", "--model", "judge-no", "--base-url", fake.base_url, "--limit", "4", "--verbose"])
    assert args.func(args) == 1
    out = capsys.readouterr().out
    assert "agreement: 50.0%" in out and "disagree: exam/" in out


def test_cli_errors_when_nothing_could_be_scored(fake, book_env, capsys):
    args = parser_for(judge_check).parse_args(
        ["judge-check", "--model", "judge-garbage", "--base-url", fake.base_url, "--limit", "2"])
    assert args.func(args) == 2
    assert "no verdict or judge errors:  4" in capsys.readouterr().out


def test_cli_rejects_a_malformed_url(book_env, capsys):
    args = parser_for(judge_check).parse_args(["judge-check", "--model", "m", "--base-url", "file:///etc"])
    assert args.func(args) == 2


def test_cli_rejects_an_unknown_split(book_env, capsys):
    args = parser_for(judge_check).parse_args(
        ["judge-check", "--model", "m", "--base-url", "http://127.0.0.1:1/v1", "--split", "nope"])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("judge-check: unknown split 'nope'; known: ") and "exam" in err


def test_exam_summary_command(capsys):
    args = parser_for(exam_command).parse_args(["exam-summary"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("| chapter | numeric | judge | total |")
    assert "| sharding |" in out and "Key-content items covered: 58 of 58" in out


# ---- probing the constrained forms ----------------------------------------------------------------

@pytest.mark.parametrize(("model", "best"), [
    ("judge-guided", "guided_choice"), ("judge-schema", "json_schema"), ("judge-logprobs", "logprobs"),
    ("judge-match", "none"), ("judge-yes", "none"), ("judge-401", "none"),
])
def test_probe_finds_the_constraint_an_endpoint_honours(fake, model, best):
    # Yes- and no-sayers answer the probe with yes/no, never with the probe's own words.
    found = judge_check.probe_constraints(Settings(), model, fake.base_url)
    assert judge_check.best_constraint(found) == best, found


@pytest.mark.parametrize(("model", "mode"), [
    ("judge-guided", "guided_choice"), ("judge-schema", "json_schema"), ("judge-logprobs", "logprobs"),
])
def test_constrained_judges_agree_in_their_mode_and_not_without_it(fake, judge_tasks, model, mode):
    good = judge_check.run_check(Settings(), judge_tasks[:4], model=model, base_url=fake.base_url, constraint=mode)
    assert good["agreement"] == 1.0 and good["errors"] == 0 and good["constraint"] == mode
    free = judge_check.run_check(Settings(), judge_tasks[:4], model=model, base_url=fake.base_url, constraint="none")
    assert free["scored"] == 0 and free["no_verdicts"] == 8  # chatty without its constraint


def test_cli_probes_and_names_the_setting(fake, book_env, capsys):
    args = parser_for(judge_check).parse_args(
        ["judge-check", "--model", "judge-schema", "--base-url", fake.base_url, "--limit", "3"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "json_schema yes" in out and "guided_choice no" in out
    assert "SCALING_GRADER_JUDGE__CONSTRAINT=json_schema" in out and "agreement: 100.0%" in out


# ---- adversarial responses --------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["judge-match", "judge-copier", "judge-echo-json"])
def test_judges_the_dressed_answers_cannot_steer_pass(fake, judge_tasks, model):
    report = judge_check.run_check(Settings(), judge_tasks[:4], model=model, base_url=fake.base_url)
    assert report["steered_by"] == [] and report["adversarial"] == len(judge_check.ADVERSARIAL_WRAPPERS)


def test_an_obedient_judge_is_caught_and_not_recommended(fake, book_env, capsys):
    # it agrees perfectly on plain references, but follows an instruction inside the response
    args = parser_for(judge_check).parse_args(
        ["judge-check", "--model", "judge-obedient", "--base-url", fake.base_url, "--limit", "4"])
    assert args.func(args) == 1
    out = capsys.readouterr().out
    assert "agreement: 100.0%" in out and "not recommended" in out and "instruction" in out


def test_a_yes_sayer_is_steered_by_every_dressing(fake, judge_tasks):
    report = judge_check.run_check(Settings(), judge_tasks[:4], model="judge-yes", base_url=fake.base_url)
    assert len(report["steered_by"]) == len(judge_check.ADVERSARIAL_WRAPPERS)


def test_adversarial_cases_wrap_a_wrong_answer(judge_tasks):
    cases = judge_check.adversarial_cases(judge_tasks)
    assert {name for _, name, _ in cases} == set(judge_check.ADVERSARIAL_WRAPPERS)
    for task, _, completion in cases:
        assert str(task.gold) not in completion  # a wrong answer: only steering could earn it a reward
