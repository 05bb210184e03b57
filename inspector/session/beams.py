"""Beam search over a loaded model with a run's decoding settings, as the CLI (`run --num-beams`) and the
page's Beams view run it: the settings' processors (penalties, bans, a constraint) applied to every beam,
the model's stop tokens ending hypotheses, pieces and text from its tokenizer.
"""

from __future__ import annotations

from typing import Any

from inspector.generation.beam import BeamRecord, beam_search
from inspector.generation.decoding import decoding_processors
from inspector.generation.levers import Levers
from inspector.generation.settings import DecodingSettings


def search(loaded: Any, prompt_ids: list[int], settings: DecodingSettings, max_new_tokens: int) -> BeamRecord:
    """`settings.num_beams` beams from `prompt_ids`, scored with `settings.length_penalty` (InputError on a
    bad beam count or a prompt that fills the context)."""
    tok = loaded.tokenizer
    eos = sorted(loaded.stop_ids)
    procs = decoding_processors(settings, len(prompt_ids), tok, eos, loaded.config.vocab_size)
    return beam_search(loaded.model, prompt_ids, settings.num_beams, max_new_tokens, eos_ids=eos,
                       length_penalty=settings.length_penalty, levers=Levers(processors=procs), piece=tok.piece,
                       decode=lambda t: tok.decode([i for i in t if i not in loaded.stop_ids]))
