"""Replays of recorded deliberations: parse published logs into Transcripts and re-settle them."""

from medpanel.replay.mcc import load_logs, replay_logs, replay_mcc_folder
from medpanel.replay.mcc_longform import parse_long_form, replay_long_form
from medpanel.replay.mcc_parse import CHOICE_READINGS, SEATS, ChoiceReading, ParsedLog, parse_log, parse_log_file
from medpanel.replay.mcc_replay import DebateReplay, StanceShift, replay_debate, summarize_replays
from medpanel.replay.voting import MCC_RULES, VoteRules, is_consensus, vote

__all__ = ["CHOICE_READINGS", "MCC_RULES", "SEATS", "ChoiceReading", "DebateReplay", "ParsedLog", "StanceShift", "VoteRules", "is_consensus", "load_logs", "vote",
           "parse_log", "parse_log_file", "parse_long_form", "replay_debate", "replay_logs", "replay_long_form",
           "replay_mcc_folder", "summarize_replays"]
