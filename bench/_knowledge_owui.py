"""Open WebUI's default retrieval, reproduced for the knowledge bench (a reproduction: Open WebUI
itself is not run). Read off open-webui's backend source (retrieval/loaders/main.py,
routers/retrieval.py `save_docs_to_vector_db`, config.py), its defaults:

- loaders (CONTENT_EXTRACTION_ENGINE ""): `.pdf` PyPDFLoader, one document a page (pypdf's
  `extract_text`); `.html` BSHTMLLoader (file opened with encoding "unicode_escape", lxml,
  `get_text()`); `.md` TextLoader; `.rst` UnstructuredRSTLoader when the `unstructured` package is
  installed, else TextLoader (the fallback is what is reproduced here); each text through
  `ftfy.fix_text` when ftfy can be imported;
- ENABLE_MARKDOWN_HEADER_TEXT_SPLITTER True: MarkdownHeaderTextSplitter on `#`..`######`,
  strip_headers False, on every document; CHUNK_MIN_SIZE_TARGET 0 (no merging);
- TEXT_SPLITTER "" → RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=100,
  add_start_index=True) — langchain-text-splitters from PyPI;
- each chunk embedded with its newlines replaced by spaces, no prefix; the query embedded as is;
- ENABLE_RAG_HYBRID_SEARCH False: the nearest chunks by cosine (Chroma's collection space
  "cosine"; here every vector is compared, which an HNSW search approximates).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

HEADERS = [("#", "Header 1"), ("##", "Header 2"), ("###", "Header 3"), ("####", "Header 4"),
           ("#####", "Header 5"), ("######", "Header 6")]


def _fix(text: str) -> str:
    try:
        import ftfy
    except ImportError:
        return text
    return ftfy.fix_text(text)


def load(path: Path) -> list[str]:
    """The documents Open WebUI's default loader makes of one file (page_content only)."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        import pypdf

        texts = [page.extract_text() or "" for page in pypdf.PdfReader(str(path)).pages]
    elif suffix in (".html", ".htm"):
        from bs4 import BeautifulSoup

        with open(path, encoding="unicode_escape") as f:
            texts = [BeautifulSoup(f, "lxml").get_text("")]
    else:
        texts = [path.read_text(encoding="utf-8")]
    return [_fix(t) for t in texts]


def chunks(path: Path) -> list[str]:
    from langchain_text_splitters import MarkdownHeaderTextSplitter, RecursiveCharacterTextSplitter

    by_headers = MarkdownHeaderTextSplitter(headers_to_split_on=HEADERS, strip_headers=False)
    splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=100, add_start_index=True)
    parts = [piece.page_content for text in load(path) for piece in by_headers.split_text(text)]
    return [c for part in parts for c in splitter.split_text(part)]


class Index:
    """Every chunk of the corpus with its vector; `search` is a query's nearest `k` by cosine."""

    def __init__(self, root: Path, files: list[Path], embed) -> None:
        self.embed = embed
        self.names: list[str] = []
        self.texts: list[str] = []
        started = time.perf_counter()
        for path in files:
            for text in chunks(path):
                self.names.append(str(path.relative_to(root)))
                self.texts.append(text)
        self.split_s = time.perf_counter() - started
        vectors = []
        for start in range(0, len(self.texts), 64):
            batch = [t.replace("\n", " ") for t in self.texts[start:start + 64]]
            vectors.extend(embed(batch))
        self.matrix = np.asarray(vectors, dtype=np.float32)
        self.matrix /= np.linalg.norm(self.matrix, axis=1, keepdims=True)

    def search(self, query: str, k: int) -> list[tuple[str, str]]:
        vector = np.asarray(self.embed([query])[0], dtype=np.float32)
        scores = self.matrix @ (vector / np.linalg.norm(vector))
        best = np.argsort(-scores)[:k]
        return [(self.names[i], self.texts[i]) for i in best]
