"""What `bench/knowledge.py passages` counts: whether a returned passage answers a question, and
the recall figures of one system over a question set. Plain Python, no Django (tested alone)."""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

_MARKUP = re.compile(r"[\W_]+")  # markup and punctuation alike: whatever is not a letter or a digit


def normalise(text: str) -> str:
    """Lowercase, every run of markup, punctuation and whitespace one space."""
    return _MARKUP.sub(" ", text.lower()).strip()


def answers(passage: str, answer: str) -> bool:
    """The passage holds the answer span, whatever markup or line breaks either carries."""
    want = normalise(answer)
    return bool(want) and f" {want} " in f" {normalise(passage)} "


@dataclass
class Hit:
    """One returned passage: the file it came from (relative to the corpus root) and its text."""

    name: str
    text: str


@dataclass
class Scores:
    """Per-question outcomes of one system; the figures are means over the questions."""

    file_rank: list[int | None] = field(default_factory=list)  # 1-based rank of the first relevant file
    passage_rank: list[int | None] = field(default_factory=list)  # of the first answering passage
    paraphrased: list[bool] = field(default_factory=list)
    search_ms: list[float] = field(default_factory=list)

    def add(self, question: dict, hits: list[Hit], ms: float) -> None:
        relevant = set(question["relevant"])
        self.file_rank.append(next((i for i, h in enumerate(hits, 1) if h.name in relevant), None))
        self.passage_rank.append(next((i for i, h in enumerate(hits, 1)
                                       if h.name in relevant and answers(h.text, question["answer"])), None))
        self.paraphrased.append(question["kind"] == "paraphrased")
        self.search_ms.append(ms)

    @staticmethod
    def _recall(ranks: list[int | None], k: int) -> float:
        return sum(1 for r in ranks if r is not None and r <= k) / len(ranks) if ranks else 0.0

    def figures(self) -> dict:
        para = [r for r, p in zip(self.passage_rank, self.paraphrased) if p]
        literal = [r for r, p in zip(self.passage_rank, self.paraphrased) if not p]
        return {
            "questions": len(self.file_rank),
            "file_r1": self._recall(self.file_rank, 1), "file_r5": self._recall(self.file_rank, 5),
            "passage_r1": self._recall(self.passage_rank, 1), "passage_r5": self._recall(self.passage_rank, 5),
            "paraphrased_passage_r1": self._recall(para, 1), "paraphrased_passage_r5": self._recall(para, 5),
            "literal_passage_r1": self._recall(literal, 1), "literal_passage_r5": self._recall(literal, 5),
            "search_p50_ms": statistics.median(self.search_ms) if self.search_ms else 0.0,
            "passage_ranks": self.passage_rank, "file_ranks": self.file_rank,
        }


HEADER = ("| | file r@1 | file r@5 | answering passage r@1 | answering passage r@5 "
          "| paraphrased: passage r@1 / r@5 | search p50 |\n|---|---|---|---|---|---|---|")


def row(label: str, f: dict) -> str:
    return (f"| {label} | {f['file_r1']:.3f} | {f['file_r5']:.3f} | {f['passage_r1']:.3f} | {f['passage_r5']:.3f} "
            f"| {f['paraphrased_passage_r1']:.2f} / {f['paraphrased_passage_r5']:.2f} | {f['search_p50_ms']:.0f} ms |")


def load_set(path: Path, which: str) -> list[dict]:
    """The questions of set `which` ("frozen" or "dev"), each checked for the fields counted."""
    spec = json.loads(path.read_text())
    questions = spec[which]
    for q in questions:
        missing = {"q", "relevant", "answer", "kind"} - set(q)
        if missing or q["kind"] not in ("literal", "paraphrased"):
            raise ValueError(f"question {q.get('q')!r}: missing {sorted(missing)} or bad kind")
    return questions
