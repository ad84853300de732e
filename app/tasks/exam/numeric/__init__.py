"""Numeric exam questions, one module per chapter. Each module builds QUESTIONS with
``collector()``: the decorated function is the question's oracle, and its parameters are exactly
the raw quantities the prompt states."""

from __future__ import annotations

from collections.abc import Callable

from app.tasks.exam.model import Number, NumericQuestion, Oracle

# chapter -> module name (chapter ids are file stems; module names cannot hold dashes)
CHAPTER_MODULES: dict[str, str] = {
    "roofline": "roofline",
    "tpus": "tpus",
    "sharding": "sharding",
    "transformers": "transformers",
    "training": "training",
    "applied-training": "applied_training",
    "inference": "inference",
    "applied-inference": "applied_inference",
    "profiling": "profiling",
    "jax-stuff": "jax_stuff",
    "gpus": "gpus",
}


def collector() -> tuple[list[NumericQuestion], Callable[..., Callable[[Oracle], Oracle]]]:
    questions: list[NumericQuestion] = []

    def numeric(nnn: int, items: tuple[str, ...] | str, units: tuple[str, ...] | str, template: str,
                **args: Number) -> Callable[[Oracle], Oracle]:
        def register(oracle: Oracle) -> Oracle:
            question = NumericQuestion(
                nnn=nnn,
                items=(items,) if isinstance(items, str) else tuple(items),
                template=" ".join(template.split()),
                args=args,
                oracle=oracle,
                units=(units,) if isinstance(units, str) else tuple(units),
            )
            question.check_signature()
            questions.append(question)
            return oracle

        return register

    return questions, numeric
