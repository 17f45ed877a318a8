"""Blinded human evaluation, and LLM judges checked against people (docs/rating.md).

    rubrics.py          the rubrics as data: mcc-physician, mcc-layperson, pick-best, otb-audit
    sessions.py         blinded sessions over stored runs: assignment, letters, order, recording ratings
    store.py            the SQL of the rating tables (migration 0008_rating_sessions)
    agreement.py        pure maths: percent agreement, Cohen's and Fleiss' kappa, Spearman, confusion, permutation tests
    judge_agreement.py  a judge's stored scores against the people's settled ratings
    report.py           rating_summary (data) and rating_section_html (a fragment for the run report)

A layer at the level of runs: it reads runs, scoring, protocols, models and cases, never cli or web.
"""

from __future__ import annotations

from medpanel.rating.rubrics import RUBRICS, get_rubric
from medpanel.rating.sessions import create_session, next_task, progress, record, sessions_for

__all__ = ["RUBRICS", "create_session", "get_rubric", "next_task", "progress", "record", "sessions_for"]
