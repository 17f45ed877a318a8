"""Training a small model to hold a tumor board (OpenTumorBoard, section 3.3 and appendix E; docs/training.md).

- `data`: Board Simulation examples from cases (prompt-completion records as TRL reads them), split by
  recording into train and validation, written as JSONL.
- `weights`: the starting model, a Hugging Face folder or a GGUF file de-quantized into one.
- `sft`: supervised finetuning with TRL's SFTTrainer, full or LoRA, with checkpoints and resume.
"""
