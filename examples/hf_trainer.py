"""Train a Hugging Face model with the settings an autotune preset measured.

autotune presets export best.yaml --format hf --output hf_args.yaml
python examples/hf_trainer.py hf_args.yaml
"""

import sys
from pathlib import Path

import torch
import yaml
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

settings = yaml.safe_load(Path(sys.argv[1]).read_text())  # batch, accumulation, precision, ...
args = TrainingArguments(output_dir="hf_run", report_to="none", **settings)

model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=64))
ids = torch.randint(0, 256, (256, 64))  # stands in for tokenized text of the preset's length
train = [{"input_ids": row, "labels": row} for row in ids]
Trainer(model=model, args=args, train_dataset=train).train()
