"""The user docs' links held to the tree: every relative link in README.md, docs/ and the
examples' READMEs names a file that exists, and its ``#anchor`` a heading there (GitHub's slug)
or an ``<a id>``; and each of the kit's own words links to its glossary entry where a document
first uses it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*/README.md")]
)
GLOSSARY = ROOT / "docs" / "glossary.md"

# Written by the benchmarks and the fault matrix from their own code (``make reliability``,
# ``make cost``, ``python -m bench.wire_docs``): a link added by hand would be lost at the next
# run, so the glossary rule leaves them out (their links are still checked).
GENERATED = {"reliability.md", "cost.md", "bodies.md"}

# The kit's own words, as a reader meets them (the glossary's other entries, TrainGate, rollout,
# worker, record, are the field's words); each pattern with the inflections the docs use.
JARGON = {
    "hand-off": r"hand-offs?",
    "lease": r"(?<!polling )leases?",
    "outbox": r"outbox",
    "parked": r"parked",
    "re-drive": r"re-driv(?:e|es|en|ing)",
    "due-index": r"due\s+index",
    "settle": r"settl(?:e|ed|es|ing)",
    "sweep": r"sweeps?",
    "idempotency-slot": r"idempotency\s+slots?",
    "callback-key": r"callback\s+keys?",
    "server-key": r"server\s+keys?",
    "stand-in": r"stand-ins?",
    "polling-lease": r"polling\s+leases?",
    "live-index": r"live\s+index",
    "durable-worker": r"durable\s+workers?",
}

_LINK = re.compile(r"\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation gone, spaces as '-'."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    anchors: set[str] = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slug = _slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _links(path: Path) -> list[tuple[str, str]]:
    text = _FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)
    return [(label, target) for label, target in _LINK.findall(text)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken: list[str] = []
    for _, target in _links(doc):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file_part, _, anchor = target.partition("#")
        where = (doc.parent / file_part).resolve() if file_part else doc
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            broken.append(f"{target}: no heading or <a id> '{anchor}' in {where.name}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_glossary_has_an_entry_for_every_word_checked() -> None:
    assert set(JARGON) <= _anchors(GLOSSARY)


def _prose(text: str) -> str:
    """The text with what is not prose blanked, offsets kept: fenced blocks, headings, inline
    code, HTML tags and link targets (a link's label stays: a first use may be one)."""

    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    text = _FENCE.sub(blank, text)
    text = re.sub(r"^#{1,6} .*$", blank, text, flags=re.M)
    text = re.sub(r"`[^`\n]*`", blank, text)
    text = re.sub(r"<[^>\n]*>", blank, text)
    return re.sub(r"\]\([^)\s]+\)", blank, text)


def first_uses_unlinked(doc: Path) -> list[str]:
    """The words whose first use in ``doc`` is not a link to their glossary entry."""
    text = doc.read_text()
    prose = _prose(text)
    glossary = "glossary.md" if doc.parent == GLOSSARY.parent else "docs/glossary.md"
    links = [(match.start(1), match.end(1), match.group(2)) for match in _LINK.finditer(text)]
    unlinked: list[str] = []
    for anchor, pattern in JARGON.items():
        found = re.search(rf"(?<![\w-]){pattern}(?![\w-])", prose, re.I)
        if found is None:
            continue
        inside = [target for start, end, target in links if start <= found.start() < end]
        if inside != [f"{glossary}#{anchor}"]:
            line = text.count("\n", 0, found.start()) + 1
            unlinked.append(f"{anchor} (line {line}: {found.group(0)!r})")
    return unlinked


@pytest.mark.parametrize(
    "doc",
    [d for d in DOCS if d != GLOSSARY and d.name not in GENERATED],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_each_word_of_the_kit_links_to_the_glossary_where_first_used(doc: Path) -> None:
    unlinked = first_uses_unlinked(doc)
    assert not unlinked, (
        f"{doc.relative_to(ROOT)}: first used without a link to docs/glossary.md: "
        + ", ".join(unlinked)
    )


# Where the code and the docs send a reader by name: `docs/aws.md, "First deploy"` (or
# README's, or a doc of the same folder's), in a docstring, a comment, a message or a doc.
_SECTION_REF = re.compile(r"((?:docs/)?[a-z0-9-]+\.md|README)`?,?\s+[\"'“]([^\"'”\n]{3,80})[\"'”]")
_SOURCES = sorted(
    [
        *(ROOT / "rollout_sdk").rglob("*.py"),
        *(ROOT / "bench").rglob("*.py"),
        *(ROOT / "testkit").rglob("*.py"),
        ROOT / "handler.py",
        ROOT / "Makefile",
        ROOT / "template.yaml",
        *DOCS,
    ]
)


def _sections(path: Path) -> list[str]:
    """A document's headings and its bold paragraph leads (``**Counts before parsing.**``)."""
    text = _FENCE.sub("", path.read_text())
    titles = re.findall(r"^#{1,6} (.+)$", text, re.M) + re.findall(
        r"^\*\*([^*\n]+)\*\*", text, re.M
    )
    return [re.sub(r"[`*]|\[([^\]]*)\]\([^)]*\)", r"\1", title).strip().lower() for title in titles]


def test_every_section_named_by_name_is_there() -> None:
    missing: list[str] = []
    for source in _SOURCES:
        # wrapped lines (and a comment's or docstring's continuation) joined into one
        text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", source.read_text())
        for name, section in _SECTION_REF.findall(text):
            target = ROOT / ("README.md" if name == "README" else name)
            if "/" not in name and name != "README":
                target = ROOT / "docs" / name
            where = source.relative_to(ROOT)
            if not target.exists():
                missing.append(f"{where}: no file {name}")
            elif section.strip().rstrip(".,").lower() not in " | ".join(_sections(target)):
                missing.append(f"{where}: no section {section!r} in {name}")
    assert not missing, "; ".join(missing)
