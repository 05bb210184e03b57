"""The tour's glossary: the words the views use, each in one or two plain sentences.

`GLOSSARY` is (term, meaning) in the order a reader meets them along the pipeline; `glossary_html()` is the
definition list the tour shows. Pure data and one HTML builder.
"""

from __future__ import annotations

from inspector.viz.common import esc

GLOSSARY: tuple[tuple[str, str], ...] = (
    ("token", "A piece of text the model reads or writes: a word, part of a word, a space or a byte. "
              "The model only ever sees token ids, numbers from 0 to the vocabulary size."),
    ("embedding", "The vector of numbers a token id is looked up as (one row of the embedding matrix)."),
    ("residual stream", "The running vector per position that every layer reads and adds its output to; "
                        "after the last layer it becomes the prediction."),
    ("attention head", "One of several parallel attention computations in a layer; each can look at "
                       "different earlier positions."),
    ("query / key / value", "Attention compares the new position's query with every earlier position's key; "
                            "the scores weight those positions' values, which are added up."),
    ("KV cache", "The keys and values of every past position, kept so that a decode step only computes "
                 "the new token instead of the whole text again."),
    ("GQA", "Grouped-query attention: several query heads share one key/value head, so the KV cache is "
            "that many times smaller."),
    ("logits", "One score per vocabulary entry for the next token; higher means more likely."),
    ("softmax", "Turns logits into probabilities that add up to 1 (exponentiate, then divide by the sum)."),
    ("temperature", "Logits are divided by it before softmax: below 1 sharpens the distribution, above 1 "
                    "flattens it, 0 means always take the top token (greedy)."),
    ("top-k / top-p", "Filters before the draw: keep only the k most likely tokens, or the most likely ones "
                      "whose probabilities add up to p."),
    ("prefill", "The first forward: all prompt tokens at once, filling the KV cache; it yields the first "
                "new token (time to first token)."),
    ("decode", "Every later forward: one token at a time, reading the KV cache (time per output token)."),
)


def glossary_html() -> str:
    """The glossary as one definition list."""
    rows = "".join(f'<dt>{esc(term)}</dt><dd>{esc(meaning)}</dd>' for term, meaning in GLOSSARY)
    return f'<dl id="tour-glossary" class="ii-glossary">{rows}</dl>'
