"""How knowledge search fuses its lists (knowledge_app.search): weighted reciprocal rank fusion
whose weights follow the kind of query — a question in plain words is the vectors' to answer,
a query of names and codes the words'. The weights were measured with bench/ranking.py."""

from __future__ import annotations

import pytest

from knowledge_app import search


@pytest.mark.parametrize("query, kind", [
    ("invoice 4711", "literal"),
    ('"spare key" flowerpot', "literal"),
    ("logging.basicConfig level DEBUG", "literal"),
    ("boiler pressure", "keywords"),
    ("where do I keep the passport", "question"),
    ("passport renewal office hours", "keywords"),
    ("Why does adding 0.1 and 0.2 not give exactly 0.3?", "question"),  # exact tokens, but asked
    ("passport?", "question"),
    ("what was the total of the invoice 4711 from last spring", "question"),
])
def test_the_kind_of_a_query(query, kind):
    assert search.query_kind(query) == kind


def fused_ids(query: str, by_words: list[int], by_meaning: list[int], exact: list[int] = ()) -> list[int]:
    return [i for i, _ in search.weighted_fuse(query, [(i, 0.0) for i in by_words], [(i, 0.0) for i in by_meaning],
                                               list(exact))]


def test_a_question_trusts_the_meaning_more_than_its_common_words():
    # 1: first by the words (the question's common words), third by meaning; 2: first by meaning, fifth by words.
    by_words, by_meaning = [1, 3, 4, 5, 2], [2, 6, 1]
    assert fused_ids("how do I keep the radiators from going cold", by_words, by_meaning)[0] == 2
    # With the words' vote equal to the vectors' (plain RRF), the word match would win.
    assert search.fuse(by_words, by_meaning)[0][0] == 1


def test_a_literal_query_keeps_the_words_vote():
    by_words, by_meaning = [1, 3, 4, 5, 2], [2, 6, 1]
    assert fused_ids("radiator RX-200", by_words, by_meaning)[0] == 1
    assert fused_ids("radiator valve", by_words, by_meaning)[0] == 1  # a few keywords too


def test_a_questions_exact_tokens_still_count_fully():
    # 7 has invoice 4711 in it: the words' fourth and the vectors' ninth, but it has every exact token.
    by_words, by_meaning = [1, 2, 3, 7], [1, 2, 3, 4, 5, 6, 8, 9, 7]
    assert fused_ids("what was the total of invoice 4711?", by_words, by_meaning, exact=[7])[0] == 7
