"""Training a small model to hold a tumor board (OpenTumorBoard, section 3.3 and appendix E).

- `data`: Board Simulation examples from cases (prompt-completion records as TRL reads them), split by
  recording into train and validation, written as JSONL.
"""
