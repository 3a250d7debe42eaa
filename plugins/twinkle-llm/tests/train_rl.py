"""A LoRA reinforcement-learning run in a process of its own, for the exact-resume test (modes: ``resumable``)."""

from resumable import train

# 2 epochs of 3 steps (11 training prompts, 4 per batch), groups of 4 sampled completions, a checkpoint every 2 steps
train("reinforcement_learning", {"lora_rank": 4, "lr": 1e-2, "max_epochs": 2, "batch_size": 4, "group_size": 4,
                                 "max_new_tokens": 8, "rewards": [{"name": "format", "pattern": "7", "search": True}],
                                 "checkpoint_every_n_steps": 2, "progress_bar": False})
