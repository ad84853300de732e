"""Numeric exam questions, one module per chapter; each builds its QUESTIONS with
``app.tasks.exam.model.collector()``."""

from __future__ import annotations

from app.tasks.exam.model import NumericQuestion
from app.tasks.exam.numeric import (
    applied_inference,
    applied_training,
    gpus,
    inference,
    jax_stuff,
    profiling,
    roofline,
    sharding,
    tpus,
    training,
    transformers,
)

# chapter -> its questions, in the book's order (chapter ids are file stems with dashes; module
# names cannot hold them)
CHAPTER_QUESTIONS: dict[str, list[NumericQuestion]] = {
    "roofline": roofline.QUESTIONS,
    "tpus": tpus.QUESTIONS,
    "sharding": sharding.QUESTIONS,
    "transformers": transformers.QUESTIONS,
    "training": training.QUESTIONS,
    "applied-training": applied_training.QUESTIONS,
    "inference": inference.QUESTIONS,
    "applied-inference": applied_inference.QUESTIONS,
    "profiling": profiling.QUESTIONS,
    "jax-stuff": jax_stuff.QUESTIONS,
    "gpus": gpus.QUESTIONS,
}
