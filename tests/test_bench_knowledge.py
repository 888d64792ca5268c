"""The passage bench's counting (bench/_knowledge_metrics.py) and its question file: a figure in
bench/README.md is only as good as what decides that a passage answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench._knowledge_metrics import Hit, Scores, answers, load_set, normalise

QUESTIONS = Path(__file__).resolve().parent.parent / "bench" / "data" / "knowledge_passages.json"


def test_it_finds_the_span_through_markup_and_line_breaks():
    passage = "Config\n======\n\nOnly values in **uppercase** are actually\nstored in the ``config`` object later on."
    assert answers(passage, "Only values in uppercase are actually stored in the config object later on.")


def test_it_does_not_count_a_passage_that_holds_only_part_of_the_span():
    passage = "Only values in uppercase are actually stored"  # the rest went to the next passage
    assert not answers(passage, "Only values in uppercase are actually stored in the config object later on.")


def test_it_matches_whole_words_only():
    assert not answers("a 4040 not found is raised", "404 not found is raised")
    assert not answers("anything", "")


def test_normalise_turns_punctuation_and_case_into_single_spaces():
    assert normalise("400-499 indicate errors with the client's\n request") == "400 499 indicate errors with the client s request"


def test_scores_count_the_answering_passage_only_in_a_relevant_file():
    question = {"q": "?", "kind": "paraphrased", "relevant": ["a.rst"], "answer": "the answer is here today"}
    scores = Scores()
    scores.add(question, [Hit("b.rst", "the answer is here today"), Hit("a.rst", "other words"),
                          Hit("a.rst", "so the answer is here today.")], 12.0)
    literal = dict(question, kind="literal")
    scores.add(literal, [Hit("c.rst", "nothing")], 30.0)
    f = scores.figures()
    assert (f["file_r1"], f["file_r5"]) == (0.0, 0.5)
    assert (f["passage_r1"], f["passage_r5"]) == (0.0, 0.5)
    assert (f["paraphrased_passage_r5"], f["literal_passage_r5"]) == (1.0, 0.0)
    assert f["passage_ranks"] == [3, None] and f["search_p50_ms"] == 21.0


def test_the_question_sets_have_the_promised_shape():
    for which, size in (("frozen", 40), ("dev", 24)):
        questions = load_set(QUESTIONS, which)
        assert len(questions) == size
        assert sum(q["kind"] == "paraphrased" for q in questions) == size // 2
        assert all(5 <= len(q["answer"].split()) <= 15 for q in questions)
    frozen = {q["answer"] for q in load_set(QUESTIONS, "frozen")}
    assert not frozen & {q["answer"] for q in load_set(QUESTIONS, "dev")}  # no tuning on a held-out span


def test_it_refuses_a_question_without_its_kind(tmp_path):
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"frozen": [{"q": "?", "relevant": ["a"], "answer": "x y z w v"}]}))
    with pytest.raises(ValueError, match="kind"):
        load_set(path, "frozen")
