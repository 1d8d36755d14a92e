"""A small reading of the report page's DOM (stdlib html.parser): the timelines and, per
timeline, its marks by kind, its broker lines and its shaded stretches."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Timeline:
    policy: str
    marks: Counter[str] = field(default_factory=Counter)  # kind -> marks
    lines: list[str] = field(default_factory=list)  # each line's `d`
    overloads: int = 0
    bundle_strips: int = 0
    gaps: int = 0
    titles: list[str] = field(default_factory=list)


class PageReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.timelines: list[Timeline] = []
        self.sections: list[str] = []
        self.tags: Counter[str] = Counter()
        self.attributes: list[tuple[str, str]] = []
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags[tag] += 1
        self.attributes.extend(a.items())
        classes = a.get("class", "").split()
        if tag == "section" and "policy" in classes:
            self.sections.append(a["data-policy"])
        if tag == "svg" and "timeline" in classes:
            self.timelines.append(Timeline(policy=a["data-policy"]))
        if not self.timelines:
            return
        current = self.timelines[-1]
        if "mark" in classes:
            current.marks[a["data-kind"]] += 1
        if "load" in classes:
            current.lines.append(a["d"])
        current.overloads += "overload" in classes
        current.bundle_strips += "bundles-over" in classes
        current.gaps += "gap" in classes
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title and self.timelines:
            self.timelines[-1].titles.append(data)


def read_page(html: str) -> PageReader:
    reader = PageReader()
    reader.feed(html)
    reader.close()
    return reader
