"""The project explains itself in its own documents: every citation of a document names one the
repository has, down to the section.

- No file cites the external specification the project was written from (its sections are not
  in the repository); the contract is ``docs/contract.md``, the words ``docs/concepts.md``.
- Every ``docs/<file>.md`` named anywhere (code comments, docstrings, messages, configuration,
  documents) exists, and a ``docs/<file>.md#anchor`` names a heading of it.
- Every relative link of a Markdown file (``[text](target)``, ``[text](#anchor)``) resolves to
  a file of the repository and, with an anchor, to a heading of it.

Anchors are GitHub's: the heading's text, lower-cased, without punctuation, spaces as hyphens,
``-1``, ``-2``… for repeats.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Written so that this file does not match itself.
_SECTION_SIGN = "\u00a7"
_EXTERNAL = re.compile(
    r"(?<![A-Za-z0-9_])SPEC(?![A-Za-z0-9_])|SPEC\s*(?:" + _SECTION_SIGN + r"|\\u00a7)")
_DOC_CITATION = re.compile(r"(?<![\w./-])docs/([\w./-]+?\.md)(?:#([\w-]+))?")
_MD_LINK = re.compile(r"(?<!!)\[(?:[^\]\n]|\n(?!\n))*?\]\(([^()\s]*)\)")
_SKIPPED_DIRS = {".git", ".venv", ".venv-spark35", ".cache", "__pycache__", "node_modules",
                 ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache", "warehouse"}


def repository_files() -> list[Path]:
    """The checkout's files: git's tracked and untracked-but-not-ignored ones, else a walk."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
        files = [ROOT / name for name in listed if name]
    except (OSError, subprocess.SubprocessError):
        files = [path for path in ROOT.rglob("*")
                 if not _SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts)]
    return sorted(path for path in files if path.is_file())


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def texts() -> dict[Path, str]:
    found = {}
    for path in repository_files():
        text = text_of(path)
        if text is not None and path != Path(__file__).resolve():
            found[path] = text
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def without_code_blocks(markdown: str) -> str:
    """The Markdown with fenced code blocks blanked (line numbers kept)."""
    out, fence = [], None
    for line in markdown.splitlines():
        marker = re.match(r"^\s*(```+|~~~+)", line)
        if fence is None and marker:
            fence = marker.group(1)[:3]
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors a Markdown file has: its headings' and explicit ``<a id=…>`` ones."""
    text = without_code_blocks(path.read_text())
    seen: dict[str, int] = {}
    found = set()
    for match in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, flags=re.MULTILINE):
        base = slug(match.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return frozenset(found)


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def test_the_slug_is_githubs() -> None:
    assert slug("Only handed barriers, only own sinks") == "only-handed-barriers-only-own-sinks"
    assert slug("No I/O under a write lock") == "no-io-under-a-write-lock"
    assert slug("`metaservice-demo`") == "metaservice-demo"
    assert slug("Spark 3.5 and the Iceberg runtime, offline") == (
        "spark-35-and-the-iceberg-runtime-offline")


def test_nothing_cites_the_external_specification() -> None:
    found = [f"{path.relative_to(ROOT)}:{line_of(text, m.start())}: {m.group(0)!r}"
             for path, text in texts().items() for m in _EXTERNAL.finditer(text)]
    assert not found, ("cite docs/contract.md (or docs/concepts.md) instead:\n"
                       + "\n".join(found[:50]))


def test_every_cited_doc_and_section_exists() -> None:
    missing = []
    for path, text in texts().items():
        for m in _DOC_CITATION.finditer(text):
            target = ROOT / "docs" / m.group(1)
            where = f"{path.relative_to(ROOT)}:{line_of(text, m.start())}: {m.group(0)}"
            if not target.is_file():
                missing.append(f"{where} (no such file)")
            elif m.group(2) and m.group(2) not in anchors(target):
                missing.append(f"{where} (no such section)")
    assert not missing, "\n".join(missing)


def test_every_markdown_link_resolves() -> None:
    broken = []
    for path, text in texts().items():
        if path.suffix != ".md":
            continue
        body = without_code_blocks(text)
        for m in _MD_LINK.finditer(body):
            target = m.group(1)
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, …
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(ROOT)}:{line_of(body, m.start())}: {target}"
            if not resolved.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where} (no such section)")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("name", ["concepts.md", "contract.md"])
def test_the_project_ships_its_concepts_and_contract(name: str) -> None:
    assert (ROOT / "docs" / name).is_file()
    readme = (ROOT / "README.md").read_text()
    top = readme.split("\n## ", 1)[0]  # the two set-up commands and the lines after them
    assert "docs/concepts.md" in top, "the README's top links the concepts page"
