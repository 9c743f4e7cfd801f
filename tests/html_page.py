"""An HTML report as a test reads it: html.parser, no browser."""

from __future__ import annotations

from html.parser import HTMLParser


class Page(HTMLParser):
    """Sections (by id) with their figures and tables, and anything that would fetch from outside."""

    def __init__(self, text: str):
        super().__init__()
        self.sections: dict[str, dict] = {}
        self.tables: dict[str, int] = {}  # table id -> body rows
        self.external: list[str] = []
        self._section = None
        self._table = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag in ("script", "link", "iframe", "object", "embed") or (
                tag in ("img", "image", "source") and not str(attrs.get("src", attrs.get("href", ""))).startswith("#")):
            self.external.append(f"<{tag} {attrs}>")
        for name in ("src", "href", "xlink:href"):
            if "://" in str(attrs.get(name, "")):
                self.external.append(f"{name}={attrs[name]}")
        if tag == "section":
            self._section = attrs["id"]
            self.sections[self._section] = {"svg": 0, "tables": []}
        elif tag == "svg" and self._section:
            self.sections[self._section]["svg"] += 1
        elif tag == "table":
            self._table = attrs.get("id")
            if self._section:
                self.sections[self._section]["tables"].append(self._table)
            if self._table:
                self.tables[self._table] = 0
        elif tag == "tr" and self._table:
            self.tables[self._table] += 1
