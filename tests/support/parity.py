"""A converted checkpoint against transformers on the same directory: the model as transformers loads it,
the prompt ids its AutoTokenizer gives, the logits at every position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def transformers_model(directory: Path) -> Any:
    """AutoModelForCausalLM on a converted directory, fp32, eager attention (the reference implementation)."""
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32,
                                                             attn_implementation="eager").eval()


def assert_same_ids(loaded: Any, prompts: list[str]) -> list[list[int]]:
    """transformers' AutoTokenizer on the converted directory gives the engine's prompt ids: plain (BOS once, at
    the start, when the tokenizer adds it) and through the chat template where there is one. The ids checked."""
    import transformers

    hf_tok = transformers.AutoTokenizer.from_pretrained(str(loaded.weights_path))
    tok, checked = loaded.tokenizer, []
    for prompt in prompts:
        ids = tok.prompt_ids(prompt, chat=False)
        assert ids == hf_tok(prompt)["input_ids"], prompt
        assert ids.count(tok.bos_id) == int(tok.add_bos) and (ids[:1] == [tok.bos_id]) is tok.add_bos, prompt
        checked.append(ids)
        if tok.has_chat_template:
            ids = tok.prompt_ids(prompt, chat=True)
            assert ids == hf_tok.apply_chat_template([{"role": "user", "content": prompt}], tokenize=True,
                                                     add_generation_prompt=True, return_dict=False), prompt
            checked.append(ids)
    return checked


def assert_same_logits(loaded: Any, hf: Any, id_lists: list[list[int]]) -> float:
    """transformers' model on the converted directory gives the engine's logits at every position (within fp32
    rounding: 1e-4 + 1e-5 x |logit|, as Gemma's logits reach 80); the largest difference seen."""
    worst = 0.0
    for ids in id_lists:
        with torch.no_grad():
            want = hf(torch.tensor([ids])).logits[0]  # (T, V)
            got = loaded.model(torch.tensor([ids]))[0].float()
        worst = max(worst, float((got - want).abs().max()))
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-4), (ids, float((got - want).abs().max()))
        assert torch.equal(got.argmax(-1), want.argmax(-1)), ids
    return worst
