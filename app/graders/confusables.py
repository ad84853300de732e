"""Characters that look like Latin letters (or a colon) folded to them, one character for one,
for finding the ``Final answer:`` label: a label written with a Cyrillic ``а`` reads as the
label to anyone looking at the completion, so it must count as one (else an earlier line would
be graded instead of the answer a reader sees last).

The table is the part of Unicode TR39's confusables (the skeleton mapping) whose prototype is a
single Latin letter, for the scripts that supply look-alikes in practice (Cyrillic, Greek,
Armenian, Cherokee, Lisu, small capitals and letter-like symbols), plus every character whose
compatibility form (NFKC) is one ASCII letter (mathematical alphanumerics, circled, full-width,
super- and subscript letters). One for one, so positions in the folded view are positions in
the text: the answer itself is read from the text as written."""

from __future__ import annotations

import unicodedata

# prototype letter -> look-alikes (TR39 confusables.txt, single-character entries)
_LOOK_ALIKES = {
    "a": "\u0430\u0251\u03b1\u237a\uff41",
    "A": "\u0410\u0391\u13aa\u15c5\ua4ee\u1d00",
    "B": "\u0412\u0392\u13f4\u15f7\ua4d0\u0299",
    "b": "\u042c\u0184\u13cf\u1472",
    "c": "\u0441\u03f2\u1d04\u217d\u2ca5\uabaf",
    "C": "\u0421\u03f9\u13df\u216d\u2ca4\ua4da",
    "d": "\u0501\u13e7\u146f\ua4d2\u217e",
    "D": "\u13a0\u15de\u15ea\ua4d3\u216e",
    "e": "\u0435\u04bd\u212e\uab32\u1971",
    "E": "\u0415\u0395\u13ac\u2d39\ua4f0\u1d07",
    "f": "\u017f\u1e9d\u0584\uab35",
    "F": "\u03dc\u15b4\ua4dd",
    "g": "\u0261\u1d83\u018d\u0581",
    "G": "\u050c\u13c0\u13f3\ua4d6\u0262",
    "h": "\u04bb\u0570\u13c2",
    "H": "\u041d\u0397\u13bb\u157c\ua4e7\u029c\u2c8e",
    "i": "\u0456\u0131\u0269\u03b9\u1fbe\u026a\u2170\u04cf\u13a5",
    "I": "\u0406\u0399\u04c0\u2160\ua4f2\u01c0",
    "j": "\u0458\u03f3",
    "J": "\u0408\u037f\u13ab\u148d\ua4d9\u1d0a",
    "k": "\u03ba\u043a\u1d0b\u2c95",
    "K": "\u041a\u039a\u13e6\u16d5\ua4d7\u2c94",
    "l": "\u05c0\u07ca\u2d4f\u2113\u217c\u2223\u0661\u06f1",
    "L": "\u13de\u14aa\ua4e1\u216c\u029f",
    "M": "\u041c\u039c\u13b7\u15f0\ua4df\u216f\u1d0d",
    "n": "\u0578\u057c\u0274",
    "N": "\u039d\ua4e0\u2c9a",
    "o": "\u043e\u03bf\u0585\u0d20\u1d0f\u2c9f\u0ed0\u101d",
    "O": "\u041e\u039f\u0555\u2c9e\ua4f3\u0d02",
    "p": "\u0440\u03c1\u2ca3\u1d18",
    "P": "\u0420\u03a1\u13e2\u146d\ua4d1\u2ca2",
    "q": "\u051b\u0563\u0566",
    "Q": "\u051a\u2d55",
    "r": "\u0433\u1d26\u2c85\uab47\uab48\uab81",
    "R": "\u13a1\u13d2\u16b1\ua4e3\u01a6\u0280",
    "s": "\u0455\ua731\u01bd",
    "S": "\u0405\u054f\u13d5\u13da\ua4e2",
    "t": "\u03c4\u1d1b",
    "T": "\u0422\u03a4\u13a2\ua4d4\u22a4\u2ca6",
    "u": "\u057d\u03c5\u1d1c\uab4e\ua79f",
    "U": "\u054d\u144c\ua4f4\u222a\u22c3",
    "v": "\u03bd\u0475\u05d8\u1d20\u2174\u2228\u22c1",
    "V": "\u0474\u2d38\u13d9\ua4e6\u2164",
    "w": "\u0461\u051d\u1d21\u026f\uab83",
    "W": "\u051c\u13b3\u13d4\ua4ea",
    "x": "\u0445\u03c7\u2179\u00d7\u292b\u292c\u2a2f",
    "X": "\u0425\u03a7\u2169\u2d5d\ua4eb\u2cac",
    "y": "\u0443\u03b3\u028f\u04af\u10e7\u1eff",
    "Y": "\u04ae\u03a5\u13a9\u13bd\ua4ec\u2ca8",
    "z": "\u1d22\uab93",
    "Z": "\u0396\u13c3\ua4dc",
    ":": "\u02d0\u02f8\u0589\u05c3\u0703\u0704\u0903\u0a83\u16ec\u1803\u1809\u205a\u2236\ua4fd\ua789\ufe13"
         "\ufe30\ufe55\uff1a",
}

# Blocks holding characters whose compatibility form is one ASCII letter.
_NFKC_BLOCKS = ((0x00AA, 0x00BA), (0x02B0, 0x02FF), (0x1D00, 0x1DBF), (0x2070, 0x209F), (0x2100, 0x218F),
                (0x2460, 0x24FF), (0xFF01, 0xFF5E), (0x1D400, 0x1D7FF), (0x1F130, 0x1F189))


def _table() -> dict[int, str]:
    table: dict[int, str] = {}
    for low, high in _NFKC_BLOCKS:
        for code in range(low, high + 1):
            folded = unicodedata.normalize("NFKC", chr(code))
            if len(folded) == 1 and folded.isascii() and (folded.isalpha() or folded == ":"):
                table[code] = folded
    for letter, look_alikes in _LOOK_ALIKES.items():
        for c in look_alikes:
            table[ord(c)] = letter
    return table


LATIN_SKELETON = _table()


def latin_skeleton(text: str) -> str:
    """``text`` with look-alikes of Latin letters and of the colon replaced by them, one for one
    (the same length, so a match's positions are positions in ``text``)."""
    if text.isascii():
        return text
    return text.translate(LATIN_SKELETON)
