"""Scenario descriptions as HTML: a small, safe subset of Markdown (code spans, emphasis, links, paragraphs).

Descriptions are written in Markdown (backticks around field names); shown escaped they read as raw backticks.
They come from a scenario file anyone can write, so everything outside the subset is escaped: markdown-it-py
with raw HTML off (``<script>`` stays text) and its link validation (no ``javascript:``, ``vbscript:``,
``file:`` or ``data:`` URLs); images are off, so the report still loads nothing but itself.
"""

from __future__ import annotations

from markdown_it import MarkdownIt

# "zero" enables nothing but paragraphs and text; the subset is switched on rule by rule
_MD = MarkdownIt("zero", {"html": False, "linkify": False, "typographer": False}).enable(
    ["backticks", "emphasis", "link", "escape", "newline"])


def render_description(text: str) -> str:
    """``text`` (Markdown) as HTML of the safe subset; links open as plain links, without a referrer."""
    html = _MD.render(text.strip())
    return html.replace("<a href=", '<a rel="noopener noreferrer" href=')
