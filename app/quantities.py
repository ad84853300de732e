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

from app.arithmetic import evaluate_at

_REGISTRY_FILE = Path(__file__).with_name("units.txt")


@lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    return pint.UnitRegistry(str(_REGISTRY_FILE), autoconvert_offset_to_baseunit=False)


@dataclass(frozen=True, slots=True)
class Quantity:
    value: float  # in base units (bytes, seconds, flops)
    dimension: str  # e.g. "[information] / [time]", "dimensionless"
    text: str  # as written
    # "70.6B" alone is 70.6 bytes or 70.6 billion: the second reading, a count, used only
    # against a gold that is a count (parameters, tokens); None when the text has one reading.
    count_value: float | None = None

    def reading(self, dimension: str) -> float | None:
        """This quantity's value read in ``dimension``, or None if it cannot be read so. An
        unreadable unit is read in no dimension, its own included: "1 B/B/B/B/B/B/B/B/B" is not an
        answer to a gold of "1 s/s/s/s/s/s/s/s/s", nor "1 B^2" to "1 s^2"."""
        if dimension == self.dimension and dimension != UNREADABLE:
            return self.value
        if dimension == DIMENSIONLESS and self.count_value is not None:
            return self.count_value
        return None

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
    "elements weight weights query queries request requests user users cycle cycles server servers "
    "pod pods slice slices batch batches expert experts microbatch microbatches stage stages".split()
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
    **{w: "day" for w in ("d", "day", "days")},
    **{w: "week" for w in ("wk", "wks", "week", "weeks")},
    **{w: "year" for w in ("yr", "yrs", "year", "years")},
    **{w: "hertz" for w in ("Hz", "hertz")},
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
_DECIMAL_PREFIXES = frozenset(p for p in _SHORT_PREFIXES if "i" not in p)
_PREFIXABLE = {
    # Every SI prefix on seconds and hertz ("ks", "GHz", "mHz"); binary ones only on bytes,
    # bits and operations, where they are used.
    "second": _DECIMAL_PREFIXES,
    "hertz": _DECIMAL_PREFIXES,
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
               "flops": "flop", "second": "second", "seconds": "second", "op": "op", "ops": "op",
               "hertz": "hertz"}

_MULTIPLIER_WORDS = {
    "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12, "quadrillion": 1e15,
    "mn": 1e6, "bn": 1e9, "tn": 1e12,
}
# A letter after a number, ending its word, is a multiplier: "1.5M", "16K tokens", "3.2T FLOPs".
# "B" is one too before a count or operation word ("70B params", "5B FLOPs"); alone ("70.6B",
# "212B total") it is bytes or billions, and which one depends on what the gold measures
# (Quantity.count_value).
_SUFFIX_MULTIPLIERS = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
_MULTIPLIED_BASES = frozenset({"count", "flop", "op"})


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
# \frac{a}{b}, \dfrac, \tfrac, \cfrac, and the brace-less \frac13 or \frac1{3}.
_LATEX_FRAC = re.compile(
    r"\\[dtc]?frac\s*(?:\{([^{}]*)\}|([0-9A-Za-z]))\s*(?:\{([^{}]*)\}|([0-9A-Za-z]))"
)
_LATEX_ROOT = re.compile(r"\\sqrt\s*(?:\[([^\[\]{}]*)\])?\s*(?:\{([^{}]*)\}|([0-9A-Za-z]))")
# Arithmetic the evaluator reads (app/arithmetic.py): digits, operators, brackets, roots, pi.
_ARITHMETIC_ONLY = re.compile(r"[\d\s.,+\-*/^()×·√π]*")
_PLAIN_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d{1,4})?")
# SI digit groups: "1 234 567" with thin or no-break spaces (or LaTeX "\,") is one number.
_LATEX_THIN_GROUP = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
_SI_GROUP = re.compile(r"(?<=\d)[\u2009\u202f\u00a0](?=\d{3}(?!\d))")
# "1 000" and "12 345 678": digit groups of three after a plain space form one number. The first
# group has one to three digits and no digit, point or comma stands right before it, so decimals
# ("1.5 000") and lists with commas are left alone. Read a run of space-separated digits at a time
# (``_join_groups``): a single pattern for the number (``[1-9]\d{0,2}(?: \d{3})+`` with look-arounds)
# was tried again from every group of a run that does not end as a number does, scanning to the
# run's end each time, so one answer line of 200,000 characters ("1 111 111 ... 1111") held a
# grading process for two minutes (and 4,096 characters held the event loop for 0.1 s).
_DIGIT_RUN = re.compile(r"\d+(?: \d+)*+")
_DECIMAL_PART = re.compile(r"[\d.,]\d")


def _join_groups(m: re.Match[str]) -> str:
    """The run of digit tokens ``m`` with its grouped number joined, as the pattern above would:
    the tokens from the first one that can open a number (one to three digits, not starting with
    0, nothing of a number right before it) through the run's end, if every token after it has
    exactly three digits and no decimal part follows the run."""
    run = m.group()
    tokens = run.split(" ")
    last = len(tokens) - 1
    if last == 0 or _DECIMAL_PART.match(m.string, m.end()):
        return run
    first_group = len(tokens)  # the tokens from here to the end all have three digits
    while first_group > 0 and len(tokens[first_group - 1]) == 3:
        first_group -= 1
    opened_after = m.start() == 0 or m.string[m.start() - 1] not in ".,"
    for i in range(max(first_group - 1, 0), last):  # at least one group after the opening token
        token = tokens[i]
        if len(token) <= 3 and token[0] in "123456789" and (i > 0 or opened_after):
            return " ".join([*tokens[:i], "".join(tokens[i:])])
    return run


_SUPERSCRIPT = re.compile("[\u2070\u00b9\u00b2\u00b3\u2074-\u2079\u207a\u207b]+")
_SUPERSCRIPT_ASCII = str.maketrans("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207a\u207b",
                                   "0123456789+-")


def _frac(m: re.Match[str]) -> str:
    """\\frac{a}{b}: the division "(a)/(b)" when both parts are arithmetic (the evaluator
    reads it, a leading minus included), else "a / b" (units such as \\frac{TB}{s})."""
    top = (m.group(1) if m.group(1) is not None else m.group(2)).strip()
    bottom = (m.group(3) if m.group(3) is not None else m.group(4)).strip()
    if top and bottom and _ARITHMETIC_ONLY.fullmatch(top) and _ARITHMETIC_ONLY.fullmatch(bottom):
        return f"({top})/({bottom})"
    return f" {top} / {bottom} "


def _root(m: re.Match[str]) -> str:
    """\\sqrt{x} -> √(x); \\sqrt[n]{x} -> (x)^(1/(n)): a value the evaluator reads, so that
    "4\\sqrt{2}" is 5.66, never the leading 4."""
    index = m.group(1)
    radicand = (m.group(2) if m.group(2) is not None else m.group(3)).strip()
    if index is None:
        return f"√({radicand})"
    return f"(({radicand})^(1/({index.strip() or 2})))"


def _superscripts(m: re.Match[str]) -> str:
    return "^" + m.group().translate(_SUPERSCRIPT_ASCII)


# Operators and exponent groups first, so that a fraction or root holding them ("\frac{2^{10}}{4}",
# "\frac{15 \times 10^9}{9}") is arithmetic the evaluator reads.
_LATEX_OPERATORS = [
    (re.compile(r"\\times"), "×"),
    (re.compile(r"\\cdot"), "·"),
    (re.compile(r"\\div\b"), "/"),
    (re.compile(r"\\pi\b"), "π"),
    (re.compile(r"\\(?:left|right|displaystyle)"), ""),
    (re.compile(r"\^\s*\{([^{}]*)\}"), r"^(\1)"),
]
_LATEX_SIMPLE = [
    (_LATEX_THIN_GROUP, ""),
    # display and inline math delimiters: \[ 9 \], \( 9 \)
    (re.compile(r"\\[\[\]()]"), " "),
    (re.compile(r"\\(?:approx|simeq|sim)\b"), "≈"),
    (re.compile(r"\\[,;:! ]|\\quad|\\qquad|~"), " "),
    (re.compile(r"\\pm|\\mp"), "±"),
    (re.compile(r"\\mu\s*"), "µ"),
    (re.compile(r"\\%"), "%"),
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
        for pattern, repl in _LATEX_OPERATORS:
            text = pattern.sub(repl, text)
        for _ in range(3):  # nested fractions and roots, innermost first
            new = _LATEX_ROOT.sub(_root, _LATEX_FRAC.sub(_frac, text))
            if new == text:
                break
            text = new
        for pattern, repl in _LATEX_SIMPLE:
            text = pattern.sub(repl, text)
    if " " in text:
        text = _DIGIT_RUN.sub(_join_groups, text)
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


# Where an expression starts without a digit: "(9+1)", "-(10)/(9)", "√2", "π".
_EXPRESSION_START = re.compile(r"(?<![\w.^)])(?:-[ \t]*)?[(√π]")
# Math right after a quantity that changes its value ("80 GB × 2", "4 \\log 2", "1 s^2"): the
# quantity is not the value written, so it is read as unreadable and matches no gold.
_TRAILING_MATH = re.compile(
    r"[ \t]*(?:[×·*^√π!]|[+/][ \t]*[\d(.]|\\(?:log|ln|exp|lg|sin|cos|tan|binom|choose|sum|prod|int|"
    r"lfloor|lceil|sqrt|frac|cdot|times)\b)"
)


class _Starts:
    """The next place a quantity may start: a number (its match) or an expression opener. Each
    search result is kept until the scan passes it, so text with thousands of openers before one
    number ("((((...2") is searched once, not once per opener (quadratic)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.openers = "(" in text or "√" in text or "π" in text
        self._number: re.Match[str] | None = None
        self._number_from = -1  # the search for a number started here found self._number
        self._opener: re.Match[str] | None = None
        self._opener_from = -1

    def _cached(self, pattern: re.Pattern[str], pos: int, found: re.Match[str] | None, start: int) -> bool:
        return start >= 0 and start <= pos and (found is None or found.start() >= pos)

    def next(self, pos: int) -> tuple[int, re.Match[str] | None] | None:
        if not self._cached(_NUMBER, pos, self._number, self._number_from):
            self._number, self._number_from = _NUMBER.search(self.text, pos), pos
        number = self._number
        opener = None
        if self.openers:
            if not self._cached(_EXPRESSION_START, pos, self._opener, self._opener_from):
                self._opener, self._opener_from = _EXPRESSION_START.search(self.text, pos), pos
            opener = self._opener
        if opener is not None and (number is None or opener.start() < number.start()):
            return opener.start(), None
        if number is None:
            return None
        return number.start(), number


def find_quantities(text: str) -> list[Quantity]:
    """Every quantity in the text, in order of appearance."""
    text = normalise_text(text)
    found: list[Quantity] = []
    pos = 0
    # Scans that cannot match are skipped: an error term needs "±" or "+", and every multiplier
    # word holds an "n" (no other character matches one, even case-insensitively).
    error_terms = "±" in text or "+" in text
    multipliers = "n" in text or "N" in text
    starts = _Starts(text)
    while (start := starts.next(pos)) is not None:
        at, m = start
        evaluated = evaluate_at(text, at)
        if m is None and (evaluated is None or not evaluated.compound):
            pos = at + 1  # an opener: only a whole expression counts, else read on past it
            continue
        if evaluated is not None and evaluated.compound:
            value, pos = evaluated.value, evaluated.end
        else:
            assert m is not None
            value = _number_value(m)
            pos = _skip_error_term(text, m.end(), with_unit=False) if error_terms else m.end()
        value, pos, lone_b = _apply_multiplier(text, pos, value, multipliers)
        words, end = _scan_unit(text, pos)
        written = text[at:end].strip()[:_MAX_TEXT]
        if words is None:
            found.append(Quantity(value, DIMENSIONLESS, text[at:pos].strip()[:_MAX_TEXT]))
            pos = _after_trailing(text, pos, found)
            continue
        if words:
            factor, dimension = combine(words)
        else:
            factor, dimension = 1.0, UNREADABLE
        # "70.6B" alone: bytes, or billions when the gold is a count
        billions = value * _SUFFIX_MULTIPLIERS["B"] if lone_b and words == (("*", "byte"),) else None
        found.append(Quantity(value * factor, dimension, written, count_value=billions))
        pos = _skip_error_term(text, end, with_unit=True) if error_terms else end
        pos = _after_trailing(text, pos, found)
    return found


def _apply_multiplier(text: str, pos: int, value: float, multipliers: bool) -> tuple[float, int, bool]:
    """A multiplier word ("billion") or letter ("1.5M", "70B params") after a number. Returns
    the value, the position after the multiplier, and whether a lone "B" follows (no count or
    operation word after it): that quantity reads as bytes or billions."""
    mult = _MULTIPLIER.match(text, pos) if multipliers else None
    if mult:
        return value * _MULTIPLIER_WORDS[mult.group(1).lower()], mult.end(), False
    letter_at = pos + 1 if text[pos : pos + 1] == " " else pos
    letter = text[letter_at : letter_at + 1]
    if letter not in _SUFFIX_MULTIPLIERS or text[letter_at + 1 : letter_at + 2].isalpha():
        return value, pos, False
    after = _ATOM.match(text, letter_at + 1)
    before_word = after is not None and text[letter_at + 1 : after.start(1)].strip() == ""
    word_unit = _BASES.get(after.group(1)) if after is not None and before_word else None
    if word_unit in _MULTIPLIED_BASES:
        return value * _SUFFIX_MULTIPLIERS[letter], letter_at + 1, False
    if letter == "B":
        return value, pos, True  # "70.6B": the unit scan reads bytes; billions is the other reading
    return value * _SUFFIX_MULTIPLIERS[letter], letter_at + 1, False


def _after_trailing(text: str, pos: int, found: list[Quantity]) -> int:
    """Marks the quantity just found unreadable when math follows that changes its value."""
    if pos < len(text) and _TRAILING_MATH.match(text, pos):
        last = found[-1]
        found[-1] = Quantity(last.value, UNREADABLE, last.text)
    return pos


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
