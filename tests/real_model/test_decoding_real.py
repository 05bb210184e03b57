"""On the default model: greedy generation with repetition penalty 1.3 and no-repeat n-gram 3, and beam search
with 4 beams, equal `transformers` generate with the same arguments on the same weights, token for token;
a JSON Schema constraint gives output that parses and validates."""

from __future__ import annotations

import json

import pytest
import torch

from inspector.engine.config import SamplingParams
from inspector.generation.settings import DecodingSettings

pytestmark = pytest.mark.slow
PROMPTS = ["What is gravity?", "Write a short poem about the sea.", "List three uses of copper."]


@pytest.fixture(scope="module")
def hf(default_model):
    import transformers

    return transformers.LlamaForCausalLM.from_pretrained(default_model.weights_path, dtype=torch.float32,
                                                         attn_implementation="eager").eval()


def hf_generate(hf, default_model, ids, **kw) -> list[int]:
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), do_sample=False, pad_token_id=default_model.tokenizer.eos_id,
                          eos_token_id=sorted(default_model.stop_ids), **kw)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_with_penalties_equals_transformers(default_model, hf, prompt):
    from inspector.session.session import Session

    s = Session(default_model, record=False)
    s.set_decoding(DecodingSettings(repetition_penalty=1.3, no_repeat_ngram_size=3))
    params = SamplingParams()
    s.prefill(prompt, params, chat=True, max_new_tokens=40)
    for _ in s.play(params):
        pass
    ref = hf_generate(hf, default_model, s.prompt_ids, max_new_tokens=40, repetition_penalty=1.3,
                      no_repeat_ngram_size=3)
    assert s.generated_ids == ref
    plain = Session(default_model, record=False)
    plain.prefill(prompt, params, chat=True, max_new_tokens=40)
    for _ in plain.play(params):
        pass
    assert plain.generated_ids != s.generated_ids  # the penalties changed something


@pytest.mark.parametrize("prompt", PROMPTS)
def test_beam_search_equals_transformers(default_model, hf, prompt):
    from inspector.generation.beam import beam_search

    ids = default_model.tokenizer.prompt_ids(prompt, True)
    rec = beam_search(default_model.model, ids, 4, 24, eos_ids=sorted(default_model.stop_ids))
    assert rec.hypotheses[0].token_ids == hf_generate(hf, default_model, ids, max_new_tokens=24, num_beams=4)


def test_json_schema_output_parses_and_validates(default_model):
    import jsonschema

    from inspector.session.session import Session

    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["city", "population"], "additionalProperties": False}
    for seed in range(3):
        s = Session(default_model, record=False)
        s.set_decoding(DecodingSettings(json_schema=json.dumps(schema)))
        params = SamplingParams(temperature=1.0, seed=seed)
        s.prefill("Describe a city as JSON.", params, chat=True, max_new_tokens=60)
        for _ in s.play(params):
            pass
        assert s.finished == "eos"
        jsonschema.validate(json.loads(s.text), schema)
