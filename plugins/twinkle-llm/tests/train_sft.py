"""A LoRA instruction-tuning run in a process of its own, for the exact-resume test (modes: ``resumable``)."""

from resumable import train

# 3 epochs of 3 steps (24 training windows of one conversation, 8 per batch), a checkpoint every 2 steps
train("instruction_tuning", {"lora_rank": 4, "lora_dropout": 0.1, "lr": 1e-2, "max_epochs": 3, "batch_size": 8,
                             "max_seq_len": 48, "checkpoint_every_n_steps": 2, "progress_bar": False})
