"""The tour's glossary: the words the page uses, each in one to three plain sentences, with its source.

`GLOSSARY` is (term, meaning) in the order a reader meets them: along the pipeline first, then timing and
memory, then the Beams tab and the labs. A term naming several words separates them with " / " (each is
looked up on its own: `glossary_terms()`). `glossary_html()` is the definition list the tour shows. Pure
data and one HTML builder; tests/unit/viz/test_truth_views.py checks that every term the views' text uses has an entry.
"""

from __future__ import annotations

from inspector.viz.common import esc

GLOSSARY: tuple[tuple[str, str], ...] = (
    # ---- along the pipeline
    ("token", "A piece of text the model reads or writes: a word, part of a word, a space or a byte. The model "
              "only ever sees token ids, whole numbers from 0 to the vocabulary size minus 1."),
    ("special token / EOS", "A token with a role instead of text, such as the start of a chat turn; the chips show "
                            "them purple. EOS (end of sequence) is the one that ends generation."),
    ("chat template", "The model's own format for a conversation: markers around each turn (and a system prompt, "
                      "when you set one or the template has a default, as SmolLM2's does) wrapped around your prompt "
                      "before it is tokenized."),
    ("embedding", "The vector of numbers a token id is looked up as (one row of the embedding matrix)."),
    ("residual stream", "The running vector per position that every layer reads and adds its output to; after "
                        "the last layer, the final norm and the LM head turn it into logits."),
    ("L2 norm / ‖x‖", "A vector's length: the square root of the sum of its squared numbers. The Residual view "
                      "shows it per layer and position."),
    ("layer / block", "One transformer block: attention, then an MLP, each output added to the residual stream "
                      "(Gemma normalises each output before adding it: its post-norms). \"After layer L\" means "
                      "the residual once block L has added both; layers count from 0."),
    ("RMSNorm / final norm", "Divides a vector by its root-mean-square, then multiplies each number by a learned "
                             "weight (Gemma: by 1 + the weight) (Zhang & Sennrich 2019). It runs before attention, "
                             "before the MLP, and once more after the last layer: the final norm."),
    ("attention head / query head", "One of several parallel attention computations in a layer, each with its "
                                    "own query; each can look at different positions."),
    ("query / key / value", "Attention compares a position's query with the key of every position it may see; "
                            "the softmax of those scores weights the positions' values, which are added up."),
    ("causal", "A position attends to itself and earlier positions only, never to later ones: the triangle of "
               "the prefill's attention map."),
    ("local layer / global layer / sliding window", "A local (sliding-window) layer attends only to the newest W "
                                                    "positions, its window; a global layer to all of them. This "
                                                    "engine's KV cache keeps every position for both kinds and "
                                                    "masks what a local layer may not see."),
    ("attention sink", "A position, usually the first, that many heads attend to strongly whatever it holds: "
                       "somewhere to put attention that has nowhere useful to go (Xiao et al. 2023, StreamingLLM). "
                       "Its residual norm is often far above the other positions' (Sun et al. 2024)."),
    ("MLP", "A layer's feed-forward network, applied to each position on its own: a gated projection up to the "
            "FFN width (SwiGLU; Gemma: GELU-tanh), then one back down to the hidden size."),
    ("mixture of experts / expert / router", "A layer with several MLPs (experts) where a dense model has one: "
                                             "a small linear map, the router, scores every expert for each token, "
                                             "only the k best run, and their outputs are summed with the router's "
                                             "weights (Shazeer et al. 2017; Mixtral, Jiang et al. 2024). Memory "
                                             "holds every expert; a token's forward reads k of them per layer."),
    ("RoPE", "Rotary position embedding: each query and key is rotated by angles proportional to its position, "
             "so a score depends on how far apart the two positions are (Su et al. 2021)."),
    ("KV cache", "The keys and values of every past position, kept so that a decode step computes K and V for "
                 "the new token only, instead of for the whole text again."),
    ("KV head / GQA / MHA", "Grouped-query attention (GQA, Ainslie et al. 2023): several query heads share one "
                            "key/value (KV) head, so the KV cache is that many times smaller than with one KV head "
                            "per query head (multi-head attention, MHA)."),
    ("LM head", "The last matrix (vocabulary size × hidden size): it turns the final-normed residual into one "
                "logit per vocabulary entry. Tied: it is the embedding matrix itself, stored once."),
    ("logits", "One score per vocabulary entry for the next token, before softmax; higher means more likely."),
    ("soft-cap", "Gemma 2 squashes its logits with cap × tanh(logit / cap): large logits shrink towards the cap, "
                 "their order stays. The Sampling view shows it as the chain's first stage."),
    ("logit lens", "Reading a layer's residual as if it were the last one: final norm, then LM head (nostalgebraist "
                   "2020). It shows what that residual would predict through the output layers, not all it holds: "
                   "early layers' residuals are not yet in the form those layers read, so the lens reads them "
                   "poorly and is biased there (Belrose et al. 2023, whose per-layer tuned lens reads them better)."),
    ("decided at layer / commitment layer", "The first layer from which the logit lens's top token is the token "
                                            "the model ranks first at the output, at every layer after it too. It "
                                            "is where the lens shows the prediction; a better probe (a tuned lens) "
                                            "can show it earlier, so it is not when the model \"knows\" it."),
    ("softmax / probability", "Softmax turns logits into probabilities that add up to 1: exponentiate each, then "
                              "divide by the sum."),
    ("penalties", "Repetition penalty: the logit of every token already in the ids (prompt included) is divided "
                  "by the penalty when positive, multiplied when negative (Keskar et al. 2019). Presence / frequency "
                  "penalty: subtracted once, or per occurrence, from tokens already generated (OpenAI's rule)."),
    ("grammar / constraint", "A JSON Schema, a regular expression or a list of choices, turned into a mask of the "
                             "tokens that keep the output valid (llguidance)."),
    ("temperature", "Logits are divided by it before softmax: below 1 sharpens the distribution, above 1 "
                    "flattens it."),
    ("greedy", "Temperature 0: take the highest logit (after any penalties and masks), with no draw."),
    ("top-k", "Keep only the k highest logits (ties with the k-th are kept)."),
    ("top-p", "Nucleus sampling (Holtzman et al. 2019): keep the smallest set of most likely tokens whose "
              "probabilities add up to at least p."),
    ("min-p", "Keep the tokens whose probability is at least min-p × the top token's (Nguyen et al. 2024): the "
              "cut follows how sure the model is."),
    ("seed", "The number that fixes the random draw: the same seed, position and distribution draw the same "
             "token."),
    ("entropy / nats", "Entropy −Σ p ln p is how spread a distribution is, in nats (natural logarithm; 1 nat ≈ "
                       "1.44 bits): 0 when one token has all the probability, ln V when V tokens are equally "
                       "likely."),
    ("prefill", "The first forward: all prompt tokens at once, filling the KV cache; its logits give the first "
                "new token."),
    ("decode / decode step", "Every later forward: one token at a time, reading the KV cache."),
    ("forward", "One run of the model over some new positions: the prefill's over the prompt, a decode step's "
                "over one token."),
    # ---- timing and memory
    ("TTFT", "Time to first token. Here: tokenizing the prompt + the prefill forward + the first draw (no "
             "network or queueing, as a server would add)."),
    ("TPOT / tok/s", "Time per output token: here one decode step's forward + draw. tok/s on the status line "
                     "is 1000 ÷ the median TPOT in ms; the page's drawing is not included."),
    ("FLOP / GFLOP/s", "One floating-point operation; a multiply-add counts 2. GFLOP/s: 10⁹ of them a second."),
    ("arithmetic intensity", "FLOPs done per byte read from memory. A decode step's weight products do 2 FLOPs "
                             "per weight read: 0.5 FLOP/byte in fp32, 1 in bf16; a prefill of T tokens reuses "
                             "each weight T times (2T FLOPs per weight)."),
    ("roofline / ridge point / memory-bound", "Roofline (Williams et al. 2009): attainable FLOP/s = min(peak "
                                              "FLOP/s, bandwidth × intensity). The ridge point, peak FLOP/s ÷ "
                                              "bandwidth, is where the roofs meet: below it an operation is "
                                              "memory-bound (waits on reading), above it compute-bound."),
    ("GB/s", "Bytes read per second, in decimal units: 10⁹ bytes a second, as memory bandwidth is specified."),
    ("KiB / MiB / GiB", "Binary byte units, used for every size on this page: 1 KiB = 1024 bytes, 1 MiB = 1024 "
                        "KiB, 1 GiB = 1024 MiB. (Download sizes on PyPI and the Hub are decimal: 1 MB = 10⁶ "
                        "bytes.)"),
    ("fp32 / bf16 / dtype", "How each number is stored: fp32 (float32) in 4 bytes; bf16 (bfloat16) in 2, with "
                            "fp32's range and about 3 significant digits."),
    # ---- the Beams tab and the labs
    ("beam search / hypothesis", "Keeps the B most likely continuations (beams) instead of one token; a beam "
                                 "that ends becomes a finished hypothesis, ranked by log-probability ÷ "
                                 "length^length-penalty (as in transformers)."),
    ("log-probability", "The natural log of a probability (0 for certain, more negative for less likely); a "
                        "sequence's is the sum of its tokens'."),
    ("branch", "A run that forked from another at some step (another token forced there, or an intervention): "
               "it keeps the tokens and KV cache before the fork."),
    ("cross-entropy / loss", "−ln p(the actual next token), in nats: how surprised the model was by it."),
    ("perplexity", "exp(mean cross-entropy in nats) over a text: the model is on average as unsure as if it "
                   "chose among that many equally likely tokens; lower is better."),
    ("KL divergence", "KL(p ‖ q) = Σ p ln(p / q), in nats: how far a changed distribution q (quantized weights, "
                      "an evicting KV cache) is from the reference p; 0 when they are equal."),
    ("top-1 agreement", "How often two models (or runs) rank the same token first."),
    ("quantization / int8 / int4", "Holding weights (or the KV cache) as 8- or 4-bit integers with a scale per "
                                   "row or group of numbers: fewer bytes to read, some rounding error."),
    ("speculative decoding", "A cheap drafter proposes k tokens and the full model checks them all in one "
                             "forward (Leviathan et al. 2023; Chen et al. 2023). Greedy: the output is plain "
                             "greedy decoding's; sampling: the tokens follow the full model's distribution, "
                             "not the same text as plain decoding with the same seed."),
    ("paged KV cache / continuous batching", "Serving: the KV cache in fixed-size blocks handed out as requests "
                                             "grow (PagedAttention, Kwon et al. 2023), and a batch that admits "
                                             "and retires requests at every step (Orca, Yu et al. 2022)."),
    ("prefix caching / chunked prefill", "Reusing the KV blocks of a prompt prefix another request already "
                                         "computed; and splitting a long prefill into chunks spread over steps."),
    ("KV-cache policy", "A rule for which cached positions attention keeps: a window of the newest, attention "
                        "sinks + window (StreamingLLM), heavy hitters (H2O), SnapKV, or a quantized cache (KIVI)."),
    ("previous-token head / induction head", "Heads named by where their attention goes (Olsson et al. 2022): a "
                                             "previous-token head reads the token just before each position; an "
                                             "induction head, at a token seen earlier, reads the token that "
                                             "followed that earlier copy, and copies it into the prediction, so the "
                                             "model can continue a repeated sequence. The head atlas scores the "
                                             "attention; its Ablate tests the copying."),
    ("ablation / mean ablation / activation patching", "Ablation: removing a head's or an MLP's output to see "
                                                       "what it did, by zeroing or scaling it, or, for a head, by "
                                                       "mean ablation: its mean output (here over the prompt's "
                                                       "positions) in its place. Zeroing can move later layers off the "
                                                       "inputs they usually see; mean ablation keeps them nearer (as "
                                                       "Wang et al. 2022 use it). Patching: copying one activation "
                                                       "from a clean run into a corrupted one, to find where the "
                                                       "difference is carried."),
    ("direct logit attribution", "A token's logit written as the sum of what the embedding, each head and each "
                                 "MLP added to the final residual, read through the final norm (its scale held "
                                 "at this token's value) and the LM head."),
)


def glossary_terms() -> dict[str, str]:
    """Each single word of a term (split on " / "), lower-cased, -> the meaning it is defined by."""
    return {word.strip().lower(): meaning for term, meaning in GLOSSARY for word in term.split(" / ")}


def glossary_html() -> str:
    """The glossary as one definition list."""
    rows = "".join(f'<dt>{esc(term)}</dt><dd>{esc(meaning)}</dd>' for term, meaning in GLOSSARY)
    return f'<dl id="tour-glossary" class="ii-glossary">{rows}</dl>'
