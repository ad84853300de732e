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

# Assistant-turn openers of common chat templates; the response follows the last one.
_ASSISTANT_MARKERS = re.compile(
    r"<\|im_start\|>assistant[^\n]*\n"  # ChatML (Qwen, many others)
    r"|<\|start_header_id\|>assistant<\|end_header_id\|>\s*"  # Llama 3
    r"|<start_of_turn>model\s*"  # Gemma
    r"|\[/INST\]"  # Mistral, Llama 2
    r"|<｜Assistant｜>"  # DeepSeek
    r"|<\|assistant\|>\s*"  # Phi, Zephyr
    r"|^Assistant:|\nAssistant:",  # plain transcripts
)
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
        markers = list(_ASSISTANT_MARKERS.finditer(query))
        response = query[markers[-1].end():] if markers else query
    return without_edge_tokens(response).strip()
