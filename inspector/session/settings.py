"""What a run is given, as the page, the CLI and the Python API set it: the sampling parameters and the
decoding settings (penalties, bans, stop strings, a grammar constraint, beam search), with the bounds each
field is parsed with. They are defined where they act (`inspector.engine.config`, `inspector.generation.
settings`, `inspector.generation.constraints`); this module is the one place the layers above the session
take them from, so the page never reaches below the session.
"""

from __future__ import annotations

from inspector.engine.config import SamplingParams
from inspector.generation.constraints import check_grammar
from inspector.generation.settings import (FREQUENCY_PENALTY, LENGTH_PENALTY, MIN_NEW_TOKENS, NO_REPEAT_NGRAM,
                                           NUM_BEAMS, PRESENCE_PENALTY, REPETITION_PENALTY, DecodingSettings,
                                           parse_logit_bias)

__all__ = ["FREQUENCY_PENALTY", "LENGTH_PENALTY", "MIN_NEW_TOKENS", "NO_REPEAT_NGRAM", "NUM_BEAMS", "PRESENCE_PENALTY",
           "REPETITION_PENALTY", "DecodingSettings", "SamplingParams", "check_grammar", "parse_logit_bias"]
