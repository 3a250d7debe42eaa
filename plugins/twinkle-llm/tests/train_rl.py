"""A QLoRA reinforcement-learning run (LoRA on the base stored in NF4) in a process of its own, for the
exact-resume test (modes: ``resumable``)."""

from resumable import train

# 2 epochs of 4 steps (11 training prompts, 4 per batch: 2 whole rollout batches, each trained on twice), groups of
# 4 sampled completions, a checkpoint every 3 steps (step 3: the second rollout kept for its second update); the base
# in NF4, so that resuming also rebuilds the quantized base the run trained on
train("reinforcement_learning", {"lora_rank": 4, "quantize_base": "nf4", "lr": 1e-2, "max_epochs": 2, "batch_size": 4, "group_size": 4,
                                 "max_new_tokens": 8, "rewards": [{"name": "format", "pattern": "7", "search": True}],
                                 "updates_per_rollout": 2, "checkpoint_every_n_steps": 3, "progress_bar": False})
