"""The README and docs/ point into each other: every relative link must land on a file that exists and, when it
names a section (``file.md#section``), on a heading of that file, as GitHub renders its anchor."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCED_BLOCK = re.compile(r"^```.*?^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, each space a '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors_of(document: Path) -> set[str]:
    """The anchors of a document's headings (a repeated heading's second anchor gets '-1', its third '-2')."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#+\s+(.+)$", FENCED_BLOCK.sub("", document.read_text(encoding="utf-8")), re.M):
        anchor = github_anchor(heading)
        repeat = seen.get(anchor, 0)
        seen[anchor] = repeat + 1
        anchors.add(f"{anchor}-{repeat}" if repeat else anchor)
    return anchors


def relative_links(document: Path) -> list[str]:
    prose = FENCED_BLOCK.sub("", document.read_text(encoding="utf-8"))
    return [target for target in LINK.findall(prose) if not re.match(r"[a-z]+:", target)]


def test_the_anchor_rule_is_githubs():
    assert github_anchor("nanoGPT's GPU config (`shakespeare-char --set preset=gpu`)") == (
        "nanogpts-gpu-config-shakespeare-char---set-presetgpu")


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_lands_on_a_file_and_heading_that_exist(document):
    broken = []
    for target in relative_links(document):
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors_of(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, broken
