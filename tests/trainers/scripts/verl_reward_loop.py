"""Run inside the trainers' venv: verl 0.9's own reward loop, built from the trainer's Hydra
config with the overrides the user types (docs/trainers.md), on a local Ray: RewardLoopManager
starts its RewardLoopWorker actors, each loads the custom reward function and builds the reward
manager the config names, and compute_rm_score grades a batch. Reads JSON from argv[1]; prints
one JSON line: the rm_scores each sample got, the per-sample extra columns, and how the config
resolved."""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import ray
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tiny import tiny_model
from transformers import PreTrainedTokenizerFast
from verl import DataProto


def batch(tokenizer: PreTrainedTokenizerFast, settings: dict) -> DataProto:
    """A rollout batch as verl's agent loop leaves it: left-padded prompts, right-padded
    responses, the attention mask over both, the dataset's columns as object arrays."""
    prompts = [tokenizer.encode(p) for p in settings["prompts"]]
    responses = [tokenizer.encode(r) for r in settings["responses"]]
    width_p, width_r = max(map(len, prompts)), max(map(len, responses))
    pad = tokenizer.pad_token_id
    prompt_ids = torch.tensor([[pad] * (width_p - len(p)) + p for p in prompts])
    response_ids = torch.tensor([r + [pad] * (width_r - len(r)) for r in responses])
    mask = torch.tensor([[0] * (width_p - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (width_r - len(r))
                         for p, r in zip(prompts, responses, strict=True)])
    n = len(prompts)
    from verl import DataProto  # after the config: composing it needs none of verl's modules

    return DataProto.from_dict(
        tensors={"prompts": prompt_ids, "responses": response_ids, "attention_mask": mask,
                 "input_ids": torch.cat([prompt_ids, response_ids], dim=1)},
        non_tensors={"data_source": np.array(["scaling-book"] * n, dtype=object),
                     "reward_model": np.array([{"ground_truth": g, "style": "rule"} for g in settings["labels"]],
                                              dtype=object),
                     "extra_info": np.array([{"index": i} for i in range(n)], dtype=object)})


def main() -> None:
    settings = json.loads(sys.argv[1])
    model = tiny_model(Path(settings["model_dir"]))
    overrides = [o.replace("<model>", model) for o in settings["overrides"]]
    config_dir = str(resources.files("verl") / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    OmegaConf.resolve(config)
    if settings.get("compose_only"):
        print("RESULT " + json.dumps({"composed": True}))
        return

    from verl.experimental.reward_loop import RewardLoopManager

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True,
             runtime_env={"env_vars": settings.get("worker_env", {})})
    try:
        manager = RewardLoopManager(config)
        out = manager.compute_rm_score(batch(PreTrainedTokenizerFast.from_pretrained(model), settings))
    finally:
        ray.shutdown()
    scores = out.batch["rm_scores"].sum(dim=-1).tolist()
    print("RESULT " + json.dumps({
        "scores": scores,
        "extra": {k: [v.item() if hasattr(v, "item") else v for v in out.non_tensor_batch[k]]
                  for k in out.meta_info["reward_extra_keys"]},
        "manager": manager.reward_manager_cls.__name__,
        "function": config.reward.custom_reward_function.name,
    }))


if __name__ == "__main__":
    main()
