"""Rendering book markup to readable Markdown: Liquid, figures and HTML go; LaTeX stays."""

from __future__ import annotations

import pytest

from app.tasks.book.markdown import to_markdown

CASES = {
    "liquid details tags": ("{% details Click here. %}\nbody\n{% enddetails %}", "body"),
    "figures": ('a {% include figure.liquid path="x.png" class="img" %} b', "a  b"),
    "subscripts": ("A[B<sub>X</sub>, D<sub>YZ</sub>]", "A[B_X, D_YZ]"),
    "subscript with punctuation": ("T<sub>i j</sub>", "T_{i j}"),
    "superscript": ("N<sup>2</sup>", "N^2"),
    "coloured bold": ('<b markdown=1 style="color: red;">Pop Quiz:</b> x', "**Pop Quiz:** x"),
    "footnote": ("a<d-footnote>why</d-footnote>.", "a (Footnote: why)."),
    "citation": ('x<d-cite key="k"></d-cite>', "x"),
    "layout tags": ('<p markdown=1 class="takeaway">text</p>', "text"),
    "html heading": ('<h3 markdown=1 class="next-section">Next</h3>', "### Next"),
    "latex kept": (r"$$\frac{2BDF}{W_\text{ici}}$$", r"$$\frac{2BDF}{W_\text{ici}}$$"),
    "prose angle brackets kept": ("emit <EOS> then stop", "emit <EOS> then stop"),
    "blank runs collapsed": ("a\n\n\n\nb", "a\n\nb"),
}


@pytest.mark.parametrize(("source", "expected"), CASES.values(), ids=CASES.keys())
def test_render(source: str, expected: str) -> None:
    assert to_markdown(source) == expected
