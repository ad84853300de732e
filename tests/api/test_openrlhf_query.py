"""Cutting the response out of an OpenRLHF query: prompt and response are joined the way each
chat template joins them, and the cut must give back exactly the response that went in."""

from __future__ import annotations

import pytest

from app.api.openrlhf import response_from_query

QUESTION = "A chip does 197 TFLOP/s.\nHow long is a 1e15 FLOP matmul?"
RESPONSE = "It takes 1e15 / 197e12 s.\nFinal answer: 5.08 s"

# template name -> (prompt as rendered up to the assistant turn, end-of-turn token)
TEMPLATES = {
    "chatml": (f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n"
               "<|im_start|>assistant\n", "<|im_end|>"),
    "llama3": (f"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n{QUESTION}<|eot_id|>"
               "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>"),
    "gemma": (f"<bos><start_of_turn>user\n{QUESTION}<end_of_turn>\n<start_of_turn>model\n", "<end_of_turn>"),
    "mistral": (f"<s>[INST] {QUESTION} [/INST]", "</s>"),
    "deepseek": (f"<｜begin▁of▁sentence｜><｜User｜>{QUESTION}<｜Assistant｜>", "<｜end▁of▁sentence｜>"),
    "phi": (f"<|user|>\n{QUESTION}<|end|>\n<|assistant|>\n", "<|end|>"),
    "plain": (f"User: {QUESTION}\nAssistant:", ""),
}


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_prompt_given_exactly_is_cut_as_a_prefix(name: str) -> None:
    prompt, eot = TEMPLATES[name]
    assert response_from_query(prompt + RESPONSE + eot, prompt) == RESPONSE


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_prompt_after_an_extra_bos_is_found_inside_the_query(name: str) -> None:
    prompt, eot = TEMPLATES[name]
    assert response_from_query("<s>" + prompt + RESPONSE + eot + "<pad><pad>", prompt) == RESPONSE


@pytest.mark.parametrize("name", ["chatml", "llama3", "phi"])
def test_prompt_re_spaced_by_decoding_still_matches(name: str) -> None:
    prompt, eot = TEMPLATES[name]
    respaced = prompt.replace("\n", "\n  ").replace(" ", "  ")
    assert response_from_query(respaced + RESPONSE + eot, prompt) == RESPONSE


@pytest.mark.parametrize("name", ["chatml", "llama3", "gemma", "mistral", "deepseek", "phi", "plain"])
def test_without_a_prompt_the_last_assistant_turn_is_taken(name: str) -> None:
    prompt, eot = TEMPLATES[name]
    assert response_from_query(prompt + RESPONSE + eot, None) == RESPONSE


@pytest.mark.parametrize("name", ["chatml", "llama3", "gemma"])
def test_a_prompt_that_does_not_occur_falls_back_to_the_template(name: str) -> None:
    prompt, eot = TEMPLATES[name]
    assert response_from_query(prompt + RESPONSE + eot, "a different prompt altogether") == RESPONSE


def test_the_response_quoting_the_prompt_is_not_cut_twice() -> None:
    prompt, eot = TEMPLATES["chatml"]
    echoing = f"You asked: {QUESTION}\n{RESPONSE}"
    assert response_from_query(prompt + echoing + eot, prompt) == echoing


def test_no_prompt_and_no_template_keeps_the_whole_query() -> None:
    assert response_from_query(RESPONSE, None) == RESPONSE


@pytest.mark.parametrize(("response", "kept"), [
    ("<s>Final answer: 5 s</s> Final answer: 7 s", "<s>Final answer: 5 s</s> Final answer: 7 s"),
    ("Final answer: <s>5 s</s> 7 s", "Final answer: <s>5 s</s> 7 s"),
    ("Final answer: 7 s", "Final answer: 7 s"),
])
def test_a_struck_answer_stays_struck_while_bos_and_eos_go(response: str, kept: str) -> None:
    # the query a Llama-2-style trainer decodes: BOS, the prompt, the response, EOS
    prompt = "<s>[INST] How long? [/INST]"
    assert response_from_query(prompt + " " + response + "</s>", prompt) == kept
    assert response_from_query(prompt + " " + response + "</s>", None) == kept


@pytest.mark.parametrize("inside", [
    "Final answer: 2<|im_end|> s", "Final<pad> answer: 5.08 s", "<!<|a|>-- Final answer: 5.08 s -->",
    "Final answer: 5.08 s\n~<|a|>~Final answer: 1 s~<|a|>~", "x<|a|> Final answer: 5.08 s <|b|>y",
])
def test_token_shaped_text_inside_the_response_stays(inside: str) -> None:
    # a policy can type "<|a|>": deleting it would join what it separates, grading the text
    # differently than every other route; only the template's own edges go
    prompt, eot = TEMPLATES["chatml"]
    assert response_from_query(prompt + inside + eot + "<|endoftext|><pad>", prompt) == inside


def test_a_long_run_of_padding_is_cut_in_linear_time() -> None:
    prompt, eot = TEMPLATES["chatml"]
    query = prompt + RESPONSE + eot + "<pad>" * 200_000 + "</s>" * 50_000
    assert response_from_query(query, prompt) == RESPONSE


def test_unclosed_chatml_openers_are_no_turn_and_a_closed_one_after_them_is() -> None:
    # An opener counts only with a newline after it (its role line ends there); the search for
    # it is a substring search, so many unclosed ones cost linear time (the real-HTTP attack
    # test times a 1.26 MB query of them).
    unclosed = "<|im_start|>assistant" * 50_000
    assert response_from_query(unclosed, None).endswith("assistant<|im_start|>assistant")
    assert response_from_query(unclosed + "<|im_start|>assistant\n7 s", None) == "7 s"
    assert response_from_query("<|im_start|>assistant tail of role\n8 s" + unclosed, None).startswith("8 s")


def test_the_last_of_several_template_markers_wins() -> None:
    query = "<|im_start|>assistant\nfirst<|im_end|>[/INST] second <|im_start|>assistant\nthird"
    assert response_from_query(query, None) == "third"
    assert response_from_query("x<|im_start|>assistant\nA [/INST] B", None) == "B"
    assert response_from_query("Assistant: 4 s", None) == "4 s"
    assert response_from_query("User: hi\nAssistant: 5 s", None) == "5 s"
