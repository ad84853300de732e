"""OpenRLHF's remote reward model protocol, as pure functions: turn one ``query`` (the prompt and
the response decoded together, special tokens kept) and its label into a grade request.

How the response is cut out of the query (first rule that applies):

1. The prompt is a prefix of the query: the response is what follows it.
2. The prompt occurs inside the query (a BOS token or a system preamble was prepended when
   decoding): the response is what follows its first occurrence. If the exact text is not
   found, the same search runs with runs of whitespace collapsed, since decoding can re-space.
3. No usable prompt: the text after the last assistant-turn marker of a known chat template
   (ChatML, Llama 3, Gemma, Mistral/Llama 2 ``[/INST]``, DeepSeek, Phi, plain ``Assistant:``).
4. Otherwise the whole query.

Then only what a tokenizer adds around a completion is removed: a run of special tokens
(``<|...|>``, ``<｜...｜>``, ``<pad>``, ``<end_of_turn>``...) at the very end (EOS, padding) or the
very start (BOS), so a trailing ``<|im_end|>`` cannot stick to the answer. The same characters
inside the text stay: a policy can type them, and deleting them would join what they separate
(a number to a unit, a strike-through or comment mark), grading the text differently here than
on every other route (``without_edge_tokens``, used by all of them, removes the same edges).
``<s>`` and ``</s>`` are also HTML's strike-through, a retraction the grader honours: only an
unpaired one at either end (Llama's BOS and EOS) is removed, so a struck answer stays struck.

Labels are read by ``app.grading.labels``."""

from __future__ import annotations

import re

from app.graders.completion import without_edge_tokens

# Assistant-turn openers of common chat templates, as (literal, what may follow it): the response
# follows the last one. Found with str.rfind, never a backtracking regex: a query of many openers
# that never complete costs time linear in its length.
_CHATML = "<|im_start|>assistant"  # ChatML (Qwen, many others): the rest of its line is the role's tail
_SKIP_SPACE = (
    "<|start_header_id|>assistant<|end_header_id|>",  # Llama 3
    "<start_of_turn>model",  # Gemma
    "<|assistant|>",  # Phi, Zephyr
)
_EXACT = ("[/INST]", "<｜Assistant｜>")  # Mistral, Llama 2; DeepSeek
_PLAIN = "Assistant:"  # plain transcripts: at the start of the query or of a line


def _after_last_marker(query: str) -> int | None:
    """Where the response starts after the last assistant-turn marker, or None without one.
    Each marker kind costs one or two rfind/find calls: linear in the query."""
    found: list[tuple[int, int]] = []  # (marker start, response start)
    # ChatML's opener counts only with a newline after it: the last such opener lies before the
    # last newline, and its line ends at the first newline after it.
    last_newline = query.rfind("\n")
    if last_newline >= 0 and (at := query.rfind(_CHATML, 0, last_newline)) >= 0:
        found.append((at, query.find("\n", at + len(_CHATML)) + 1))
    for marker in _SKIP_SPACE:
        if (at := query.rfind(marker)) >= 0:
            end = at + len(marker)
            while end < len(query) and query[end].isspace():
                end += 1
            found.append((at, end))
    for marker in _EXACT:
        if (at := query.rfind(marker)) >= 0:
            found.append((at, at + len(marker)))
    if (at := query.rfind("\n" + _PLAIN)) >= 0:
        found.append((at, at + 1 + len(_PLAIN)))
    elif query.startswith(_PLAIN):
        found.append((0, len(_PLAIN)))
    return max(found)[1] if found else None


_SPACE = re.compile(r"\s+")


def _after_collapsed(query: str, prompt: str) -> str | None:
    """The query after the prompt, comparing with whitespace runs collapsed on both sides."""
    needle = _SPACE.sub(" ", prompt.strip())
    if not needle:
        return None
    # Map each position of the collapsed query back to the original one.
    collapsed, origin = [], []
    previous_space = False
    for i, c in enumerate(query):
        space = c.isspace()
        if space and previous_space:
            continue
        collapsed.append(" " if space else c)
        origin.append(i)
        previous_space = space
    found = "".join(collapsed).find(needle)
    if found < 0:
        return None
    end = found + len(needle)
    return query[origin[end]:] if end < len(origin) else ""


def response_from_query(query: str, prompt: str | None) -> str:
    """The model's response inside an OpenRLHF query (see the module docstring for the rule)."""
    response: str | None = None
    if prompt:
        if query.startswith(prompt):
            response = query[len(prompt):]
        elif (at := query.find(prompt)) >= 0:
            response = query[at + len(prompt):]
        else:
            response = _after_collapsed(query, prompt)
    if response is None:
        after = _after_last_marker(query)
        response = query if after is None else query[after:]
    return without_edge_tokens(response).strip()
