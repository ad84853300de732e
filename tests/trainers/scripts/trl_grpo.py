"""Run inside the trainers' venv: a real TRL GRPOTrainer.train() for two steps on CPU, with a
tiny random Qwen2 and a byte-level tokenizer built here (no download), rewarded by
scaling_book.trl's reward function through the service. Reads its settings as JSON from argv[1];
prints one JSON line: the steps done, and every (label, completion, reward) TRL's reward
function call saw, for the test to check against the service's own grading."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from datasets import Dataset
from tiny import tiny_model
from transformers import PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer

from scaling_book.trl import make_reward_func


def main() -> None:
    settings = json.loads(sys.argv[1])
    model = tiny_model(Path(settings["model_dir"]))
    dataset = Dataset.from_list([{"prompt": p, "task_id": label}
                                 for p, label in zip(settings["prompts"], settings["labels"], strict=True)])
    reward = make_reward_func(settings["url"], api_key=settings["api_key"], timeout=60, deadline=120)
    seen: list[tuple[str, str, float | None]] = []

    def scaling_grader(prompts: list[str], completions: list[str], task_id: list[str], **kwargs: object) -> list:
        rewards = reward(prompts=prompts, completions=completions, task_id=task_id, **kwargs)
        seen.extend(zip(task_id, completions, rewards, strict=True))
        return rewards

    args = GRPOConfig(output_dir=settings["output_dir"], max_steps=2, per_device_train_batch_size=4,
                      num_generations=4, max_completion_length=12, learning_rate=1e-4, logging_steps=1,
                      use_cpu=True, bf16=False, report_to=[], save_strategy="no", seed=0,
                      gradient_checkpointing=False, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[scaling_grader], args=args, train_dataset=dataset,
                          processing_class=PreTrainedTokenizerFast.from_pretrained(model))
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    print("RESULT " + json.dumps({"steps": trainer.state.global_step, "seen": seen,
                      "logged_rewards": [entry.get("reward") for entry in logged]}))


if __name__ == "__main__":
    main()
