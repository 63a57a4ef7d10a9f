"""A tiny, seeded Qwen2-architecture model and tokenizer built locally, without the hub.

:func:`build_tiny_model` trains a byte-level BPE on the given texts and saves a
``Qwen2Tokenizer`` plus a randomly initialised ``Qwen2ForCausalLM`` to a folder that loads back
with ``AutoTokenizer.from_pretrained`` / ``AutoModelForCausalLM.from_pretrained``.

The BPE is trained with exactly the normaliser and pre-tokeniser that ``Qwen2Tokenizer``
rebuilds on load (NFC, Qwen's split regex, which isolates every digit, then ByteLevel): in
transformers 5 ``AutoTokenizer`` picks the class from ``config.json``'s ``model_type`` and that
class reconstructs its pipeline from ``vocab`` + ``merges``, so any other pre-tokeniser would
reload with different ids.

What the vocabulary holds is ours to choose, and it is chosen so that a model trained from
scratch can *copy* identifiers:

- The BPE is trained with two extra splits in front (:data:`LETTER_RUN_PREFIX`,
  :data:`LOWERCASE_LETTER`), so no merge joins a space or quote to the letters after it, and no
  merge joins two lowercase letters. Loaded under Qwen2's pipeline, an email address is the same
  character ids in ``Hello, kenjib@yahoo.com`` and in ``{"email": "kenjib@yahoo.com"}``: a
  26-letter alphabet the model sees copied thousands of times, instead of name fragments that
  tokenise differently after a space and after a quote.
- Every pair of digits ``00``-``99`` is an added token (:data:`DIGIT_PAIRS`), so a run of digits reads
  as pairs from its first digit on: ``50754`` is ``50 75 4`` after a space, after ``": `` and after
  ``#`` alike. Copying digit by digit, a model from scratch attends by the previous digit, and with
  ten digits repeated across an order number, a customer id and dates in the context it picks the
  wrong one (``50754`` copied as ``50474``, ``51346`` as ``51364``); a hundred pairs leave it far
  fewer lookalikes. On the demo (retail, procedures declared, one run each): held-out 1/44 → 24/44.
- Words that recur in the texts (outside email addresses) are added as whole tokens that only
  match whole words (:func:`frequent_words`), so ordinary text stays about as short as with a
  word-level BPE.

Same texts, same seed, same arguments → byte-identical files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainers.errors import ConfigError

TEMPLATE_PATH = Path(__file__).parent / "templates" / "tiny_tools.jinja"

# The character before a run of letters; isolated while training the BPE (see the module docstring).
LETTER_RUN_PREFIX = r"[^\r\n\p{L}\p{N}](?=\p{L})"
# Every lowercase letter; isolated while training the BPE, so lowercase runs stay single characters.
LOWERCASE_LETTER = r"\p{Ll}"
EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+")
WORD = re.compile(r"(?<![\w@.])[A-Za-z][A-Za-z_]*[A-Za-z](?![\w@])")
# Added tokens for every two-digit string (see the module docstring).
DIGIT_PAIRS: tuple[str, ...] = tuple(f"{i:02d}" for i in range(100))
FREQUENT_WORD_MIN_COUNT = 10
FREQUENT_WORD_LIMIT = 2000

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
SPECIAL_TOKENS: tuple[str, ...] = (END_OF_TEXT, IM_START, IM_END)
# Tags the Qwen2.5 template emits; added (non-special) tokens so they are single ids that survive
# ``decode(skip_special_tokens=True)``, as in the real Qwen2.5 tokenizer.
TAG_TOKENS: tuple[str, ...] = (
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<tools>",
    "</tools>",
)


def chat_template() -> str:
    """The tiny model's chat template (Qwen2.5 tool-call format, compact tool list, generation markers)."""
    return TEMPLATE_PATH.read_text(encoding="utf-8")


def _template_tokenizer() -> Any:
    """A vocabulary-less Qwen2 tokenizer carrying the chat template, for rendering text only."""
    from transformers import Qwen2Tokenizer

    tok = Qwen2Tokenizer(eos_token=IM_END, pad_token=END_OF_TEXT)
    tok.chat_template = chat_template()
    return tok


def row_texts(rows: Iterable[dict[str, Any]]) -> list[str]:
    """Render training rows (``messages`` + ``tools``) through the chat template, as tokenizer-training text."""
    tok = _template_tokenizer()
    out: list[str] = []
    for row in rows:
        out.append(
            tok.apply_chat_template(row["messages"], tools=row.get("tools") or None, tokenize=False)
        )
    return out


def _train_bpe(texts: list[str], vocab_size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Train a byte-level BPE with Qwen2's pipeline; return (vocab, merges)."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    reference = _template_tokenizer().backend_tokenizer
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = reference.normalizer
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(LETTER_RUN_PREFIX), behavior="isolated"),
         pre_tokenizers.Split(Regex(LOWERCASE_LETTER), behavior="isolated"), reference.pre_tokenizer])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        show_progress=False,
        special_tokens=[*SPECIAL_TOKENS, *TAG_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    model = json.loads(tokenizer.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    return vocab, merges  # type: ignore[return-value]


FREQUENT_LINE_SHARE = 0.25
FREQUENT_LINE_MIN_CHARS = 12
FREQUENT_LINE_LIMIT = 256


def frequent_lines(texts: list[str]) -> list[str]:
    """Lines (policies, the tool list) that recur in at least a quarter of the texts, longest first.

    They become single added tokens: every row repeats the same system prompt, and a model
    trained from scratch on two CPU cores cannot afford to re-read ~300 word tokens of it in every
    row. The information is still in the prompt (each line is its own learned embedding); rows of
    the retail example shrink from ~600 to ~250 tokens. Lines holding chat special tokens or tool
    tags are left to those tokens.
    """
    counts: dict[str, int] = {}
    for text in texts:
        for line in set(text.split("\n")):
            counts[line] = counts.get(line, 0) + 1
    reserved = (*SPECIAL_TOKENS, *TAG_TOKENS)
    chosen = [line for line, n in counts.items()
              if n >= FREQUENT_LINE_SHARE * len(texts) and len(line.strip()) >= FREQUENT_LINE_MIN_CHARS
              and not any(token in line for token in reserved) and line == line.strip()]
    return sorted(chosen, key=lambda line: (-len(line), line))[:FREQUENT_LINE_LIMIT]


def frequent_words(texts: list[str]) -> list[str]:
    """Words (two letters or more, ``_`` allowed inside) seen at least 10 times outside email addresses.

    Most frequent first, at most 2,000. They become added tokens with ``single_word=True``, so
    they never match inside a longer word; email addresses are cut out before counting, so the
    names in them stay characters.
    """
    counts: dict[str, int] = {}
    for text in texts:
        for word in WORD.findall(EMAIL.sub(" ", text)):
            counts[word] = counts.get(word, 0) + 1
    chosen = [word for word, n in counts.items() if n >= FREQUENT_WORD_MIN_COUNT]
    return sorted(chosen, key=lambda word: (-counts[word], word))[:FREQUENT_WORD_LIMIT]


def build_tokenizer(texts: Iterable[str], *, vocab_size: int = 2048) -> Any:
    """Train the BPE on ``texts`` and wrap it in a ``Qwen2Tokenizer`` with the chat template.

    Lines that recur across the texts are added as whole tokens (:func:`frequent_lines`).
    """
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer

    corpus = [t for t in texts if t]
    if not corpus:
        raise ConfigError("build_tiny_model needs at least one non-empty text to train the tokenizer on")
    floor = 256 + len(SPECIAL_TOKENS) + len(TAG_TOKENS)
    if vocab_size < floor:
        raise ConfigError(f"vocab_size must be at least {floor} (byte alphabet plus special tokens)")
    vocab, merges = _train_bpe(corpus, vocab_size)
    tok = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        bos_token=None,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        model_max_length=32768,
    )
    tok.add_special_tokens(
        {"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in (IM_START,)]}
    )
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TAG_TOKENS])
    tok.add_tokens([AddedToken(pair, special=False, normalized=False) for pair in DIGIT_PAIRS])
    tok.add_tokens([AddedToken(line, special=False, normalized=False) for line in frequent_lines(corpus)])
    known = set(tok.get_vocab())
    tok.add_tokens([AddedToken(word, special=False, normalized=False, single_word=True)
                    for word in frequent_words(corpus) if word not in known])
    tok.chat_template = chat_template()
    for token in (*SPECIAL_TOKENS, *TAG_TOKENS):
        ids = tok.encode(token, add_special_tokens=False)
        if len(ids) != 1 or ids[0] != vocab[token]:
            raise ConfigError(f"tokenizer did not keep {token!r} as one token (got {ids})")
    return tok


class TinyModelConfig(BaseModel):
    """The shape and seed of blobkit's tiny model (what ``blobkit tiny-model`` and the company pipeline build)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    seed: int = 0
    """Seed for the random weights."""
    hidden_size: int = Field(64, ge=8)
    """Width of the model."""
    num_layers: int = Field(4, ge=1)
    """Transformer blocks."""
    num_heads: int = Field(4, ge=1)
    """Attention heads (and key/value heads)."""
    vocab_size: int = Field(600, ge=1)
    """Size of the byte-level BPE before added tokens (small: an email stays copyable characters)."""
    intermediate_size: int | None = Field(None, ge=1)
    """Width of the MLP (default: four times the hidden size)."""
    max_position_embeddings: int = Field(4096, ge=64)
    """Longest sequence the model accepts."""
    rope_theta: float = Field(10000.0, gt=0)
    """RoPE base."""
    initializer_range: float | None = Field(None, gt=0)
    """Standard deviation of the initial weights (default: 0.75 / sqrt(hidden_size))."""


def build_tiny_model(texts: Iterable[str], out_dir: Path, config: TinyModelConfig | None = None) -> Path:
    """Train a tokenizer on ``texts``, build a seeded random ``Qwen2ForCausalLM`` and save both to ``out_dir``.

    Returns ``out_dir``. Weights are drawn from a forked torch RNG, so the caller's global RNG
    state is left untouched. Files are written with safetensors.

    ``initializer_range`` defaults to ``0.75 / sqrt(hidden_size)`` (0.066 at 128, 0.094 at 64), not
    Qwen2's 0.02: with 0.02 a from-scratch model of this size sits on a loss plateau for
    ~1,000-1,500 steps before it learns to copy ids from its context (attention stays uniform), and
    with the larger scale it leaves it within ~200 (see benchmarks/tiny_sft_calibration.py).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    c = config or TinyModelConfig()
    if c.hidden_size % c.num_heads:
        raise ConfigError(f"hidden_size {c.hidden_size} is not divisible by num_heads {c.num_heads}")
    initializer_range = c.initializer_range or round(0.75 * c.hidden_size**-0.5, 4)
    out_dir = Path(out_dir)
    tok = build_tokenizer(texts, vocab_size=c.vocab_size)
    n_vocab = len(tok)
    padded_vocab = -(-n_vocab // 64) * 64
    config = Qwen2Config(
        vocab_size=padded_vocab,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size or 4 * c.hidden_size,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_heads,
        max_position_embeddings=c.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": float(c.rope_theta)},
        initializer_range=initializer_range,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        use_cache=True,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(c.seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.bos_token_id = None
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    return out_dir
