"""The public documentation set of `bench/knowledge.py passages`, fetched from the registries with
their ordinary clients into a cache under /tmp (nothing fetched is committed), versions pinned and
each archive's sha256 checked.

    flask/…      Flask 3.1.0's docs/ (reStructuredText, 75 `.rst` files) from its PyPI sdist
    starlette/…  Starlette 0.46.2's docs/ (Markdown, 25 `.md` files) from its PyPI sdist
    aptitude/…   14 pages of the aptitude user's manual (DocBook HTML), Debian `aptitude-doc-en`
    pdf/…        two real PDFs: bash's manual page (`bash.pdf`, Ghostscript, 87 pages) from Debian
                 `bash-doc`, and Backup Manager's user guide (pdfTeX, 29 pages) from Debian
                 `backup-manager-doc`
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(tempfile.gettempdir()) / "navi-knowledge-corpus"
SDISTS = {  # pip requirement -> (sha256 of the sdist, folder inside it, corpus folder, suffix)
    "flask==3.1.0": ("5f873c5184c897c8d9d1b05df1e3d01b14910ce69607a117bd3277098a5836ac",
                     "flask-3.1.0/docs", "flask", ".rst"),
    "starlette==0.46.2": ("7f7361f34eed179294600af672f565727419830b54b7b084efe44bb82d2fccd5",
                          "starlette-0.46.2/docs", "starlette", ".md"),
}
DEBS = {  # package=version -> sha256 of the .deb
    "aptitude-doc-en=0.8.13-5": "ba4864ca26464bbe06acd94dc4a79402eea5d7b2d3da943d6ecce3c752bc9e84",
    "bash-doc=5.2.15-2": "2c1a353f7004d14ba81db19c253b958d2dd9582027650739c530fd50376a9d8b",
    "backup-manager-doc=0.7.14-1.3": "8160c3c71cba260056a92eea1f80245bf5a8a98d6d443931b3dac96dc470f4d8",
}
APTITUDE_PAGES = ["pr01s02", "pr01s03", "ch01s01s03", "ch01s01s04", "ch01s01s05", "ch01s02", "ch02s01s04",
                  "ch02s02s05", "ch02s02s06", "ch02s03s02", "ch02s04s01", "ch02s04s02", "ch02s06", "ch03"]
PDFS = {  # corpus name -> path inside the unpacked .debs
    "pdf/bash.pdf": "usr/share/doc/bash/bash.pdf",
    "pdf/backup-manager-user-guide.pdf": "usr/share/doc/backup-manager-doc/user-guide.pdf.gz",
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _checked(path: Path, want: str) -> Path:
    got = _sha256(path)
    if got != want:
        sys.exit(f"{path.name}: sha256 {got}, expected {want} (the registry served another file)")
    return path


def fetch(root: Path = ROOT) -> Path:
    """Download (once) and lay out the corpus under `root`; return it."""
    if (root / ".complete").is_file():
        return root
    downloads = root.parent / (root.name + "-downloads")
    downloads.mkdir(parents=True, exist_ok=True)
    staging = root.with_name(root.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    for requirement, (digest, inside, folder, suffix) in SDISTS.items():
        name, version = requirement.split("==")
        archive = downloads / f"{name}-{version}.tar.gz"
        if not archive.is_file():
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                            "-d", str(downloads), requirement], check=True)
        with tarfile.open(_checked(archive, digest)) as tar:
            for member in tar.getmembers():
                if member.isfile() and member.name.startswith(inside + "/") and member.name.endswith(suffix):
                    dest = staging / folder / member.name.removeprefix(inside + "/")
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(tar.extractfile(member).read())
    unpacked = downloads / "debs"
    for package, digest in DEBS.items():
        name, version = package.split("=")
        found = list(downloads.glob(f"{name}_{version}_*.deb"))
        if not found:
            subprocess.run(["apt-get", "download", "-q", package], cwd=downloads, check=True)
            found = list(downloads.glob(f"{name}_{version}_*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(_checked(found[0], digest)), str(unpacked)], check=True)
    for page in APTITUDE_PAGES:
        dest = staging / "aptitude" / f"{page}.html"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(unpacked / "usr/share/doc/aptitude/html/en" / f"{page}.html", dest)
    for name, inside in PDFS.items():
        dest, source = staging / name, unpacked / inside
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes())
    (staging / ".complete").write_text("ok\n")
    shutil.rmtree(root, ignore_errors=True)
    staging.rename(root)
    return root


def files(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


if __name__ == "__main__":
    where = fetch()
    listed = files(where)
    print(f"{where}: {len(listed)} files, {sum(p.stat().st_size for p in listed) / 1e6:.1f} MB")
