"""Curation of recorded tumor-board meetings into cases (OpenTumorBoard, section 2.2; guide: docs/curation.md).

Stages with files between them, run by `pipeline.curate` (and `medpanel curate`):

- offline: `transcribe` (faster-whisper), `speakers` (resemblyzer or pyannote), `slides` (frames, the
  slide heuristic, perceptual hashes, tesseract), `align` (utterance -> slide on screen);
- model: `understand` (roles, case boundaries, captions), `extract` (summary, questions, discussion,
  conclusion), `deleak_pass` (every edit checked by the validator in `deleak`); prompts in `prompts`;
- output: `split` (60/10/30 by recording) and `case_writer` (the board case format);
- `quality`: word and diarization error rates, slide recall and duplicates, alignment accuracy.
"""
