"""Curation of recorded tumor-board meetings into cases, in model-free stages.

Each stage is a pure function with one input and one output, so a later stage (transcription, slide
capture, model calls) can be added in front without changing these:

- `deleak.check_deletion` / `deleak.check_caption`: is a model's edit of a text deletion-only?
- `align.link_utterances`: which slide was on screen while each utterance was spoken?
- `split.split_by_recording`: train/dev/test by recording, 60/10/30, seeded.
- `case_writer.write_case`: a curated case as a case folder `medpanel.cases.load_case` reads.
"""
