"""Quantities written as text -> (value in base units, physical dimension).

Two layers: a lexical one that reads the many ways people write units ("TFLOPs/s", "GBps",
"µs", "\\mathrm{GiB}", "70B params") into canonical unit names, and pint for the algebra
(prefixes and dimensions). pint is only asked about single unit words, a closed set (prefix x
base), so neither pint's own caches nor ours can be grown by candidate text; products and
quotients of words are combined here, in bounded LRU caches, and a chain of more than
``MAX_UNIT_WORDS`` words is an unreadable unit (it matches no gold), never a recursion error.

Base units: byte, second, flop. Counts (chips, tokens, layers...) are dimensionless.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import cast

import pint
from pint.util import UnitsContainer

_REGISTRY_FILE = Path(__file__).with_name("units.txt")


@lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    return pint.UnitRegistry(str(_REGISTRY_FILE), autoconvert_offset_to_baseunit=False)


@dataclass(frozen=True, slots=True)
class Quantity:
    value: float  # in base units (bytes, seconds, flops)
    dimension: str  # e.g. "[information] / [time]", "dimensionless"
    text: str  # as written

    @property
    def dimensionless(self) -> bool:
        return self.dimension == DIMENSIONLESS


DIMENSIONLESS = "dimensionless"
# A unit too long to be a unit ("per s" a thousand times): no gold has this dimension.
UNREADABLE = "unreadable unit"
# Words in one unit: the longest real one here is three ("FLOPs per byte per s"); a few more
# leave room, and the bound keeps the work per quantity constant.
MAX_UNIT_WORDS = 8

# ---- lexical layer -------------------------------------------------------------------------

# Counts are dimensionless: "256 chips" and "256" are the same answer to "how many chips".
_COUNT_WORDS = frozenset(
    "chip chips token tokens tok toks layer layers param params parameter parameters device devices "
    "GPU GPUs gpu gpus TPU TPUs tpu tpus step steps sequence sequences seq seqs head heads example "
    "examples sample samples hop hops node nodes host hosts replica replicas core cores element "
    "elements weight weights query queries request requests user users".split()
)

# Exact spellings -> pint expression. Case matters: "FLOPS" (rate) differs from "FLOPs" (count),
# and "b" (bit) from "B" (byte).
_BASES: dict[str, str] = {
    **{w: "byte" for w in ("B", "byte", "bytes", "Byte", "Bytes")},
    **{w: "bit" for w in ("b", "bit", "bits")},
    **{w: "flop" for w in ("FLOP", "FLOPs", "flop", "flops", "Flop", "Flops")},
    **{w: "op" for w in ("OP", "OPs", "op", "ops", "Op", "Ops")},
    "FLOPS": "flop / second",  # conventional spec-sheet spelling of FLOP/s
    "OPS": "op / second",
    "Bps": "byte / second",
    "bps": "bit / second",
    **{w: "second" for w in ("s", "sec", "secs", "second", "seconds")},
    **{w: "minute" for w in ("min", "mins", "minute", "minutes")},
    **{w: "hour" for w in ("h", "hr", "hrs", "hour", "hours")},
    **{w: "day" for w in ("day", "days")},
    **{w: "week" for w in ("week", "weeks")},
    "%": "percent",
    "percent": "percent",
    # Queries per second: a count rate, the same dimension as "queries/s" and "tokens/s".
    "QPS": "count / second",
    "qps": "count / second",
    **{w: "count" for w in _COUNT_WORDS},
}
# Which bases take which short prefixes: sub-second prefixes for time, large and binary ones for
# bytes, bits and operations. Anything else (say "Ms" or "mB") is not a unit here.
_SHORT_PREFIXES = {
    "p": "pico", "n": "nano", "µ": "micro", "μ": "micro", "u": "micro", "m": "milli",
    "k": "kilo", "K": "kilo", "M": "mega", "G": "giga", "T": "tera", "P": "peta", "E": "exa",
    "Z": "zetta", "Ki": "kibi", "Mi": "mebi", "Gi": "gibi", "Ti": "tebi", "Pi": "pebi", "Ei": "exbi",
}
_TIME_PREFIXES = frozenset({"p", "n", "µ", "μ", "u", "m"})
_LARGE_PREFIXES = frozenset(_SHORT_PREFIXES) - _TIME_PREFIXES
_PREFIXABLE = {
    "second": _TIME_PREFIXES,
    "byte": _LARGE_PREFIXES,
    "bit": _LARGE_PREFIXES,
    "flop": _LARGE_PREFIXES,
    "op": _LARGE_PREFIXES,
    "flop / second": _LARGE_PREFIXES,
    "op / second": _LARGE_PREFIXES,
    "byte / second": _LARGE_PREFIXES,
    "bit / second": _LARGE_PREFIXES,
}
_LONG_PREFIXES = (
    "pico", "nano", "micro", "milli", "kilo", "mega", "giga", "tera", "peta", "exa", "zetta",
    "kibi", "mebi", "gibi", "tebi", "pebi", "exbi",
)
_LONG_BASES = {"byte": "byte", "bytes": "byte", "bit": "bit", "bits": "bit", "flop": "flop",
               "flops": "flop", "second": "second", "seconds": "second", "op": "op", "ops": "op"}

_MULTIPLIER_WORDS = {
    "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "quadrillion": 1e15,
    "mn": 1e6, "bn": 1e9, "tn": 1e12,
}
# A letter glued to a number is a multiplier only before a count word ("70B params", "1.5T
# tokens"); alone, "80B" stays 80 bytes.
_SUFFIX_MULTIPLIERS = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def _atom_to_unit(atom: str) -> str | None:
    """One unit word -> pint expression, or None if it is not a unit we accept."""
    base = _BASES.get(atom)
    if base is not None:
        return base
    lower = atom.lower()
    for long_prefix in _LONG_PREFIXES:
        if lower.startswith(long_prefix):
            rest = _LONG_BASES.get(lower[len(long_prefix) :])
            if rest is not None:
                return f"{long_prefix}{rest}"
    for plen in (2, 1):
        prefix, rest = atom[:plen], atom[plen:]
        if prefix in _SHORT_PREFIXES and rest in _BASES:
            base = _BASES[rest]
            if prefix in _PREFIXABLE.get(base, ()):
                name = _SHORT_PREFIXES[prefix]
                # the prefix binds to the numerator only: "TFLOPS" = teraflop / second
                head, _, tail = base.partition(" / ")
                return f"{name}{head} / {tail}" if tail else f"{name}{head}"
    return None


@lru_cache(maxsize=1024)  # keyed by a canonical word (prefix x base): a closed, small set
def _word_factor(expression: str) -> tuple[float, tuple[tuple[str, int], ...]]:
    quantity = registry().Quantity(1.0, expression).to_base_units()
    # A dimension's exponent is a real number; pint types it as any scalar (complex included).
    exponents = tuple(sorted((str(k), int(cast("float", v))) for k, v in quantity.dimensionality.items()))
    return float(quantity.magnitude), exponents


@lru_cache(maxsize=4096)  # bounded: at most MAX_UNIT_WORDS words, so this is LRU, never a leak
def combine(words: tuple[tuple[str, str], ...]) -> tuple[float, str]:
    """(factor to base units, dimension) of a product/quotient of unit words [(op, word)],
    where op is "*" or "/" (the first word's op is "*")."""
    factor = 1.0
    exponents: Counter[str] = Counter()
    for op, word in words:
        f, dims = _word_factor(word)
        sign = -1 if op == "/" else 1
        factor = factor / f if sign < 0 else factor * f
        for name, power in dims:
            exponents[name] += sign * power
    container = UnitsContainer({k: v for k, v in exponents.items() if v})
    return factor, (DIMENSIONLESS if not container else str(container))


# ---- LaTeX and typography ------------------------------------------------------------------

_LATEX_WRAPPERS = re.compile(r"\\(?:text|mathrm|textrm|mathbf|textbf|operatorname|mbox|mathit|rm)\s*\{([^{}]*)\}")
# \phantom{...} takes up space but shows nothing: what it holds is not part of the answer.
_LATEX_PHANTOM = re.compile(r"\\[hv]?phantom\s*\{[^{}]*\}")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,4})?")
# SI digit groups: "1 234 567" with thin or no-break spaces (or LaTeX "\,") is one number.
_LATEX_THIN_GROUP = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
_SI_GROUP = re.compile(r"(?<=\d)[\u2009\u202f\u00a0](?=\d{3}(?!\d))")
_SUPERSCRIPT = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u2079\u207a\u207b]+")
_SUPERSCRIPT_ASCII = str.maketrans("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207a\u207b",
                                   "0123456789+-")


def _frac(m: re.Match[str]) -> str:
    """\\frac{a}{b}: a number when both parts are numbers, else "a / b" (units such as
    \\frac{TB}{s})."""
    top, bottom = m.group(1).strip(), m.group(2).strip()
    if _PLAIN_NUMBER.fullmatch(top) and _PLAIN_NUMBER.fullmatch(bottom):
        denominator = float(bottom)
        return f" {float(top) / denominator:.12g} " if denominator else " "
    return f" {top} / {bottom} "


def _superscripts(m: re.Match[str]) -> str:
    return "^" + m.group().translate(_SUPERSCRIPT_ASCII)


_LATEX_SIMPLE = [
    (_LATEX_THIN_GROUP, ""),
    (re.compile(r"\\[,;:! ]|\\quad|\\qquad|~"), " "),
    (re.compile(r"\\pm|\\mp"), "±"),
    (re.compile(r"\\times"), "×"),
    (re.compile(r"\\cdot"), "·"),
    (re.compile(r"\\mu\s*"), "µ"),
    (re.compile(r"\\%"), "%"),
    (re.compile(r"\\(?:left|right|displaystyle)"), ""),
    (re.compile(r"\{,\}"), ","),
    (re.compile(r"\$"), " "),
    (re.compile(r"[{}]"), ""),  # grouping braces left after the wrappers: "{2}", "10^{9}"
]


def normalise_text(text: str) -> str:
    """LaTeX and typographic variants -> plain text the number and unit scanner reads."""
    if "\\" in text or "$" in text or "~" in text or "{" in text:
        for _ in range(3):  # nested wrappers such as \text{\mathrm{GB}} or \phantom{\text{2 s}}
            new = _LATEX_WRAPPERS.sub(r"\1", _LATEX_PHANTOM.sub(" ", text))
            if new == text:
                break
            text = new
        text = _LATEX_FRAC.sub(_frac, text)
        for pattern, repl in _LATEX_SIMPLE:
            text = pattern.sub(repl, text)
    if text.isascii():
        return text
    text = _SUPERSCRIPT.sub(_superscripts, _SI_GROUP.sub("", text))
    return text.replace("−", "-").replace("\u2009", " ").replace("\u00a0", " ").replace("\u202f", " ")


# ---- scanning ------------------------------------------------------------------------------

_EXP = r"[-+]?\d{1,4}"  # bounded: no exponent has more digits than this
_NUMBER = re.compile(
    r"(?<![\w.^])(?P<sign>-)?(?:"
    rf"(?P<pbase>\d+)\s*\^\s*\{{?\s*(?P<pexp>{_EXP})\s*\}}?"  # 10^9, 2^{30}
    r"|(?P<mant>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d*)?|\.\d+)"
    rf"(?:[eE](?P<sci>{_EXP}))?"
    rf"(?:\s*(?:×|x|X|\*|·)\s*(?P<tbase>10)\s*\^\s*\{{?\s*(?P<texp>{_EXP})\s*\}}?)?"
    r")"
)
_ATOM = re.compile(r"\s*([A-Za-zµμ%]+)")
_SEPARATOR = re.compile(r"\s*(/|\bper\b|·|\*)\s*")
_MULTIPLIER = re.compile(r"\s*(thousand|million|billion|trillion|quadrillion|mn|bn|tn)\b", re.IGNORECASE)


def _power(base: float, exponent: int) -> float:
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf
    except ValueError:  # 0 to a negative power: a division by zero, not a grader fault
        return math.inf


def _number_value(m: re.Match[str]) -> float:
    """The number a match denotes, in floating point; huge exponents give inf, never a hang
    (an integer power such as 10^99999999 would be computed exactly otherwise)."""
    sign, pbase, pexp, mant, sci, texp = m.group("sign", "pbase", "pexp", "mant", "sci", "texp")  # one call
    if pbase is not None:
        value = _power(float(pbase), int(pexp))
    else:
        value = float(mant.replace(",", "") if "," in mant else mant)
        if sci is not None:
            value *= _power(10.0, int(sci))
        if texp is not None:
            value *= _power(10.0, int(texp))
    return -value if sign else value


Words = tuple[tuple[str, str], ...]  # ((op, canonical word), ...); op "*" or "/"


def _scan_unit(text: str, pos: int) -> tuple[Words | None, int]:
    """Longest run of unit words after a number: 'TB/s', 'FLOPs per byte', 'chips'. A run
    longer than MAX_UNIT_WORDS comes back as () (unreadable), with its end, read linearly."""
    m = _ATOM.match(text, pos)
    if not m:
        return None, pos
    unit = _atom_to_unit(m.group(1))
    if unit is None:
        return None, pos
    words: list[tuple[str, str]] = [("*", unit)]
    end = m.end()
    while True:
        # Only an explicit "/", "per", "·" or "*" continues a unit: "80 GB total" stops at GB.
        sep = _SEPARATOR.match(text, end)
        if sep is None:
            break
        op = "/" if sep.group(1) in ("/", "per") else "*"
        nxt = _ATOM.match(text, sep.end())
        if not nxt:
            break
        nxt_unit = _atom_to_unit(nxt.group(1))
        if nxt_unit is None:
            break
        words.append((op, nxt_unit))
        end = nxt.end()
    return (tuple(words) if len(words) <= MAX_UNIT_WORDS else ()), end


# "20.4 ± 0.1 s", "(20.4 ± 0.1) s", "20.4 s ± 0.1 s": the central value is the answer.
_PLUS_MINUS = re.compile(r"\s*(?:±|\+/-|\+-)\s*")
_ERROR_TERM = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,4})?%?\s*\)?")


def _skip_error_term(text: str, pos: int, *, with_unit: bool) -> int:
    """Position after a ``± error`` term at ``pos`` (and its unit if ``with_unit``), else ``pos``.
    Called only for a text holding "±" or "+", which every such term starts with."""
    pm = _PLUS_MINUS.match(text, pos)
    if pm is None:
        return pos
    term = _ERROR_TERM.match(text, pm.end())
    if term is None:
        return pos
    end = term.end()
    if with_unit:
        _, end = _scan_unit(text, end)
    return end


def find_quantities(text: str) -> list[Quantity]:
    """Every quantity in the text, in order of appearance."""
    text = normalise_text(text)
    found: list[Quantity] = []
    pos = 0
    # Scans that cannot match are skipped: an error term needs "±" or "+", and every multiplier
    # word holds an "n" (no other character matches one, even case-insensitively).
    error_terms = "±" in text or "+" in text
    multipliers = "n" in text or "N" in text
    while (m := _NUMBER.search(text, pos)) is not None:
        value = _number_value(m)
        pos = _skip_error_term(text, m.end(), with_unit=False) if error_terms else m.end()
        mult = _MULTIPLIER.match(text, pos) if multipliers else None
        if mult:
            value *= _MULTIPLIER_WORDS[mult.group(1).lower()]
            pos = mult.end()
        elif pos < len(text) and text[pos] in _SUFFIX_MULTIPLIERS:
            after = _ATOM.match(text, pos + 1)
            if after and _BASES.get(after.group(1)) == "count" and text[pos + 1 : after.start(1)].strip() == "":
                value *= _SUFFIX_MULTIPLIERS[text[pos]]
                pos += 1
        words, end = _scan_unit(text, pos)
        if words is None:
            found.append(Quantity(value, DIMENSIONLESS, text[m.start() : pos].strip()[:_MAX_TEXT]))
            continue
        if words:
            factor, dimension = combine(words)
        else:
            factor, dimension = 1.0, UNREADABLE
        found.append(Quantity(value * factor, dimension, text[m.start() : end].strip()[:_MAX_TEXT]))
        pos = _skip_error_term(text, end, with_unit=True) if error_terms else end
    return found


_MAX_TEXT = 200  # characters of a quantity's text kept as evidence
_MAX_CACHED_GOLD = 256  # longer gold texts are parsed, not cached: the cache holds short keys only


def parse_quantity(text: str | float | int) -> Quantity:
    """Exactly one quantity (a gold value); ValueError otherwise."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return Quantity(float(text), DIMENSIONLESS, repr(text))
    if not isinstance(text, str):
        raise ValueError("a quantity must be a string or a number")
    return _parse_gold_text(text) if len(text) <= _MAX_CACHED_GOLD else _parse_one(text)


@lru_cache(maxsize=8192)  # inline references come from clients: bounded like every text-keyed cache
def _parse_gold_text(text: str) -> Quantity:
    return _parse_one(text)


def _parse_one(text: str) -> Quantity:
    # Gold values repeat across the many completions graded per task; parse each once.
    found = find_quantities(text)
    if len(found) != 1:
        raise ValueError(f"expected one quantity in {text[:80]!r}, found {len(found)}")
    return found[0]
