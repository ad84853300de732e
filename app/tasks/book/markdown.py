"""Book source (kramdown + Liquid + inline HTML) -> readable Markdown. LaTeX is kept verbatim:
models read it well and the numeric grader's unit parser understands it."""

from __future__ import annotations

import html
import re

_FIGURE = re.compile(r"\{%-?\s*include\s+figure\.liquid.*?-?%\}", re.DOTALL)
_LIQUID_TAG = re.compile(r"\{%-?.*?-?%\}", re.DOTALL)
_LIQUID_OUTPUT = re.compile(r"\{\{.*?\}\}", re.DOTALL)
_FOOTNOTE = re.compile(r"<d-footnote>(.*?)</d-footnote>", re.DOTALL)
_CITE = re.compile(r"<d-cite\b[^>]*>.*?</d-cite>", re.DOTALL)
_IFRAME = re.compile(r"<iframe\b.*?</iframe>", re.DOTALL)
_SUB = re.compile(r"<sub>(.*?)</sub>", re.DOTALL)
_SUP = re.compile(r"<sup>(.*?)</sup>", re.DOTALL)
_BOLD = re.compile(r"<(b|strong)\b[^>]*>(.*?)</\1>", re.DOTALL)
_ITALIC = re.compile(r"<(i|em|it)\b[^>]*>(.*?)</\1>", re.DOTALL)
_CODE = re.compile(r"<code>(.*?)</code>", re.DOTALL)
_HEADING = re.compile(r"<h([1-6])\b[^>]*>(.*?)</h\1>", re.DOTALL)
_LINK = re.compile(r"<a\b[^>]*href=\"([^\"]*)\"[^>]*>(.*?)</a>", re.DOTALL)
_BREAK = re.compile(r"<br\s*/?>")
# Only tags the book uses for layout; anything else in angle brackets (say "<EOS>") is prose.
_LAYOUT_TAG = re.compile(r"</?(?:p|div|span|a|center|figure|figcaption|details|summary)\b[^>]*>")
_BLANK_RUNS = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def _script(marker: str, inner: str) -> str:
    inner = inner.strip()
    return f"{marker}{inner}" if re.fullmatch(r"[\w.]+", inner) else f"{marker}{{{inner}}}"


def to_markdown(source: str) -> str:
    text = _FIGURE.sub("", source)
    text = _LIQUID_TAG.sub("", text)
    text = _LIQUID_OUTPUT.sub("", text)
    text = _IFRAME.sub("", text)
    text = _CITE.sub("", text)
    text = _FOOTNOTE.sub(lambda m: f" (Footnote: {m.group(1).strip()})", text)
    text = _SUB.sub(lambda m: _script("_", m.group(1)), text)
    text = _SUP.sub(lambda m: _script("^", m.group(1)), text)
    text = _HEADING.sub(lambda m: f"{'#' * int(m.group(1))} {m.group(2).strip()}", text)
    text = _BOLD.sub(lambda m: f"**{m.group(2).strip()}**", text)
    text = _ITALIC.sub(lambda m: f"*{m.group(2).strip()}*", text)
    text = _CODE.sub(lambda m: f"`{m.group(1)}`", text)
    text = _LINK.sub(lambda m: f"[{m.group(2)}]({m.group(1)})", text)
    text = _BREAK.sub("\n", text)
    text = _LAYOUT_TAG.sub("", text)
    text = html.unescape(text)
    text = _BLANK_RUNS.sub("\n\n", text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines())
