"""Run inside the trainers' venv: OpenRLHF 0.11.2's own SingleTurnAgentExecutor (what its vLLM
engine actors run per rollout) fetching each rollout's reward from the --reward.remote_url it was
given, then its SamplesGenerator turning each output into an Experience (the rewards, scores and
extra_logs the PPO step reads). Reads JSON from argv[1]; prints one JSON line per route.

vLLM cannot run here (no GPU): the engine is a small object with vLLM's generate() signature that
answers each prompt with the completion the test chose, as token ids of the real tokenizer; and
`vllm` itself is an import-only module (the experience code imports SamplingParams and two helpers
at module level, and calls none of them)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

from tiny import tiny_model
from transformers import PreTrainedTokenizerFast


def _import_only_vllm() -> None:
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = type("SamplingParams", (), {})
    vllm.__version__ = "0.0.0"
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = dict
    utils = types.ModuleType("vllm.utils")
    utils.random_uuid = lambda: "0"
    vllm.inputs, vllm.utils = inputs, utils
    sys.modules.update({"vllm": vllm, "vllm.inputs": inputs, "vllm.utils": utils})


@dataclass
class Sampling:
    """The two fields of vLLM's SamplingParams the executor reads."""

    max_tokens: int | None = 64
    logprobs: int | None = None


@dataclass
class Completion:
    token_ids: list[int]
    finish_reason: str = "stop"
    logprobs: None = None


@dataclass
class RequestOutput:
    outputs: list[Completion] = field(default_factory=list)


class ChosenAnswers:
    """generate() as vLLM's engine exposes it to the executor: the completion chosen for the prompt."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, answers: dict[str, str]) -> None:
        self.tokenizer, self.answers = tokenizer, answers

    async def generate(self, prompt_token_ids: list[int], params: Sampling, multi_modal_data: object = None) -> object:
        prompt = self.tokenizer.decode(prompt_token_ids)
        ids = [*self.tokenizer.encode(self.answers[prompt]), self.tokenizer.eos_token_id]
        return RequestOutput([Completion(ids)])


async def run_route(remote_url: str, rollouts: list[dict], tokenizer: PreTrainedTokenizerFast) -> list[dict]:
    from openrlhf.trainer.ppo_utils.samples_generator import SamplesGenerator
    from openrlhf.utils.agent import SingleTurnAgentExecutor

    executor = SingleTurnAgentExecutor(remote_url)
    engine = ChosenAnswers(tokenizer, {r["prompt"]: r["completion"] for r in rollouts})
    # every rollout at once, as the engine actors run them
    outputs = await asyncio.gather(*(executor.execute(r["prompt"], r["label"], Sampling(), 4096, tokenizer, engine)
                                     for r in rollouts))
    experiences = [SamplesGenerator._process_response_into_experience(None, o, max_len=4096) for o in outputs]
    return [{"reward": None if e.rewards is None else e.rewards.tolist(),
             "score": None if e.scores is None else e.scores.tolist(),
             "info": {k: v.tolist() for k, v in e.info.items()}, "label": e.labels[0]} for e in experiences]


def main() -> None:
    settings = json.loads(sys.argv[1])
    _import_only_vllm()
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tiny_model(Path(settings["model_dir"])))
    for route in settings["routes"]:
        os.environ.update(route.get("env", {}))  # what the file route reads, per route
        out = asyncio.run(run_route(route["url"], route["rollouts"], tokenizer))
        print("RESULT " + json.dumps({"route": route["url"], "experiences": out}), flush=True)


if __name__ == "__main__":
    main()
