"""Calibrate tiny-model SFT: how fast does a from-scratch Qwen2 learn executed tool-use rows on CPU?

Makes synthetic "executed" rows (a lookup, a find-by-email-then-act chain, a count over a list),
builds the tiny model (``trainers.tiny_model``), trains it full-weight with
``trainers.local_torch.train_sft`` and scores exact match on held-out prompts whose ids and
emails never occur in training, by running the real multi-turn loop: generate_turn → parse →
execute against the synthetic world → generate again, until a final answer (at most 4 turns).

Exact match = the tool-call sequence (names and arguments) equals the reference chain and the
final answer string equals the reference answer.

Run::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tiny_sft_calibration.py --steps 900 --lr 3e-3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainers.chat_format import assistant_message, parse_assistant_output  # noqa: E402
from trainers.formats.hermes import HERMES  # noqa: E402
from world_format.canonical import canonical_json  # noqa: E402

SYSTEM = "You are the support agent of Northwind. Use the tools; answer briefly."
STATUSES = ("pending", "shipped", "delivered", "cancelled", "returned")
FIRST = ("ana", "bo", "cai", "dev", "eli", "fay", "gus", "hana", "ivo", "jun", "kim", "lea", "max", "nia")
LAST = ("berg", "cruz", "diaz", "erikson", "fox", "gray", "hill", "ito", "jones", "kato", "lund", "moss")


def _fn(name: str, description: str, props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            },
        },
    }


TOOLS: list[dict[str, Any]] = [
    _fn("get_order", "Look up one order by id.", {"order_id": {"type": "integer", "description": "Order id"}}),
    _fn(
        "find_customer",
        "Find a customer by email.",
        {"email": {"type": "string", "description": "Customer email"}},
    ),
    _fn(
        "close_account",
        "Close a customer's account.",
        {"customer_id": {"type": "integer", "description": "Customer id"}},
    ),
    _fn(
        "list_tickets",
        "List a customer's open tickets.",
        {"customer_id": {"type": "integer", "description": "Customer id"}},
    ),
]


# ---------------------------------------------------------------- synthetic world (pure functions of ids)


def _rng(*key: Any) -> random.Random:
    return random.Random(canonical_json(list(key)))


def world_call(name: str, arguments: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
    """Execute a tool call against the synthetic world (deterministic in its arguments)."""
    if name == "get_order" and isinstance(arguments.get("order_id"), int) and set(arguments) == {"order_id"}:
        oid = arguments["order_id"]
        r = _rng("order", oid)
        return {"id": oid, "status": r.choice(STATUSES), "total": round(r.randint(100, 9999) / 100, 2)}
    if name == "find_customer" and isinstance(arguments.get("email"), str) and set(arguments) == {"email"}:
        email = arguments["email"]
        local = email.split("@", 1)[0]
        digits = "".join(ch for ch in local if ch.isdigit())
        if not email.endswith("@example.com") or not digits:
            return {"error": "no customer with that email"}
        return {"id": int(digits), "email": email}
    if name in ("close_account", "list_tickets") and isinstance(arguments.get("customer_id"), int):
        cid = arguments["customer_id"]
        if set(arguments) != {"customer_id"}:
            return {"error": "bad arguments"}
        if name == "close_account":
            return {"customer_id": cid, "status": "closed"}
        r = _rng("tickets", cid)
        return [{"id": r.randint(100, 999), "subject": r.choice(("refund", "delay", "login", "billing"))}
                for _ in range(r.randint(0, 5))]
    return {"error": f"unknown tool or bad arguments: {name}"}


@dataclass(frozen=True)
class Case:
    """A prompt plus its reference chain and final answer."""

    kind: str
    user: str
    calls: tuple[tuple[str, str], ...]  # (name, canonical arguments JSON)
    answer: str


def make_case(kind: str, entity: int, r: random.Random) -> Case:
    """One case of ``kind`` about numeric ``entity``."""
    if kind == "lookup":
        obs = world_call("get_order", {"order_id": entity})
        assert isinstance(obs, dict)
        if r.random() < 0.5:
            return Case(kind, f"What is the status of order {entity}?",
                        (("get_order", canonical_json({"order_id": entity})),),
                        f"Order {entity} is {obs['status']}.")
        return Case(kind, f"What is the total of order {entity}?",
                    (("get_order", canonical_json({"order_id": entity})),),
                    f"The total of order {entity} is {obs['total']}.")
    if kind == "chain":
        email = f"{r.choice(FIRST)}.{r.choice(LAST)}{entity}@example.com"
        return Case(kind, f"Please close the account of {email}.",
                    (("find_customer", canonical_json({"email": email})),
                     ("close_account", canonical_json({"customer_id": entity}))),
                    f"Closed the account of customer {entity}.")
    if kind == "count":
        obs = world_call("list_tickets", {"customer_id": entity})
        return Case(kind, f"How many open tickets does customer {entity} have?",
                    (("list_tickets", canonical_json({"customer_id": entity})),),
                    f"Customer {entity} has {len(obs)} open tickets.")
    raise ValueError(kind)


TASK_TOOLS = {"lookup": ("get_order",), "chain": ("find_customer", "close_account"), "count": ("list_tickets",)}


def tools_for(case: Case, scope: str, compact: bool) -> list[dict[str, Any]]:
    """The tool specs a row declares: every tool (``scope="all"``), only the task's (``"task"``) or none.

    ``compact`` drops the per-parameter descriptions (shorter rows, same tool-calling skill).
    """
    if scope == "none":
        return []
    names = [t["function"]["name"] for t in TOOLS] if scope == "all" else list(TASK_TOOLS[case.kind])
    out = []
    for spec in TOOLS:
        if spec["function"]["name"] not in names:
            continue
        spec = json.loads(json.dumps(spec))
        if compact:
            for prop in spec["function"]["parameters"]["properties"].values():
                prop.pop("description", None)
        out.append(spec)
    return out


def case_row(case: Case, tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The executed training row for a case (reference chain run against the world)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": case.user}]
    for name, args_json in case.calls:
        args = json.loads(args_json)
        messages.append({"role": "assistant", "content": "",
                         "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]})
        messages.append({"role": "tool", "name": name, "content": canonical_json(world_call(name, args))})
    messages.append({"role": "assistant", "content": case.answer})
    return {"messages": messages, "tools": tools, "metadata": {"task_id": case.kind, "case_id": case.user}}


KIND_WEIGHTS = (("lookup", 0.4), ("chain", 0.35), ("count", 0.25))


def make_cases(n: int, ids: list[int], seed: int) -> list[Case]:
    """``n`` cases drawn over ``ids`` with the kind mix of KIND_WEIGHTS."""
    r = random.Random(seed)
    cases = []
    for i in range(n):
        kind = r.choices([k for k, _ in KIND_WEIGHTS], [w for _, w in KIND_WEIGHTS])[0]
        cases.append(make_case(kind, ids[i % len(ids)], r))
    return cases


def split_ids(seed: int, n_train: int, n_test: int) -> tuple[list[int], list[int]]:
    """Disjoint 4-digit id sets for training and held-out evaluation."""
    pool = list(range(1000, 10000))
    random.Random(seed).shuffle(pool)
    return pool[:n_train], pool[n_train : n_train + n_test]


# ---------------------------------------------------------------- evaluation loop


def run_episode(model: Any, tokenizer: Any, case: Case, tools: list[dict[str, Any]], max_turns: int = 4) -> bool:
    """Run the real multi-turn loop on one case; True on exact match."""
    from trainers.generation import generate_turn

    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": case.user}]
    made: list[tuple[str, str]] = []
    for _ in range(max_turns):
        text = generate_turn(model, tokenizer, messages, tools, fmt=HERMES)
        parsed = parse_assistant_output(text, HERMES)
        if parsed.parse_errors:
            return False
        if not parsed.tool_calls:
            return tuple(made) == case.calls and parsed.content == case.answer
        messages.append(assistant_message(parsed))
        for call in parsed.tool_calls:
            made.append((call["name"], canonical_json(call["arguments"])))
            obs = world_call(call["name"], call["arguments"])
            messages.append({"role": "tool", "name": call["name"], "content": canonical_json(obs)})
    return False


def evaluate(model_dir: Path, cases: list[Case], scope: str, compact: bool) -> dict[str, Any]:
    """Exact-match accuracy overall and per kind, on a model reloaded from disk."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, use_safetensors=True, dtype=torch.float32)
    model.eval()
    start = time.perf_counter()
    per_kind: dict[str, list[int]] = {}
    for case in cases:
        ok = run_episode(model, tokenizer, case, tools_for(case, scope, compact))
        per_kind.setdefault(case.kind, []).append(int(ok))
    total = sum(sum(v) for v in per_kind.values())
    return {
        "accuracy": total / len(cases),
        "per_kind": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(per_kind.items())},
        "eval_seconds": round(time.perf_counter() - start, 1),
    }


def make_probe(cases: list[Case], scope: str, compact: bool, every: int) -> Any:
    """A TrainerCallback scoring ``cases`` every ``every`` steps on the in-training model.

    The time it spends is recorded so it can be taken out of the training time.
    """
    from transformers import TrainerCallback

    class Probe(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.curve: list[tuple[int, float]] = []
            self.seconds = 0.0
            self.tokenizer: Any = None

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if every <= 0 or state.global_step % every:
                return
            start = time.perf_counter()
            model = kw["model"]
            tok = kw.get("processing_class") or self.tokenizer
            ok = sum(run_episode(model, tok, c, tools_for(c, scope, compact)) for c in cases)
            model.train()
            self.curve.append((int(state.global_step), round(ok / len(cases), 3)))
            print(f"probe step {state.global_step}: {ok}/{len(cases)}", flush=True)
            self.seconds += time.perf_counter() - start

    return Probe()


def main(argv: list[str] | None = None) -> int:
    """Build, train and score; print one JSON summary line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=600)
    p.add_argument("--test", type=int, default=60)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate", type=int, default=0, help="MLP width (0: 4 x hidden)")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--init-std", type=float, default=0.0,
                   help="initializer_range of the random weights (0: build_tiny_model's default)")
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=900)
    p.add_argument("--scheduler", default="cosine")
    p.add_argument("--warmup", type=float, default=0.05)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tools", choices=("all", "task", "none"), default="all", help="tools declared per row")
    p.add_argument("--compact", action="store_true", help="drop per-parameter descriptions from tool specs")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave default)")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--probe-every", type=int, default=0, help="score 20 held-out cases every N steps")
    a = p.parse_args(argv)

    import torch

    from trainers.sft_torch import count_row_tokens, train_sft
    from trainers.tiny_model import build_tiny_model, row_texts

    if a.threads:
        torch.set_num_threads(a.threads)
    train_ids, test_ids = split_ids(a.seed, a.rows, a.test)
    train_cases = make_cases(a.rows, train_ids, a.seed)
    test_cases = make_cases(a.test, test_ids, a.seed + 1)
    rows = [case_row(c, tools_for(c, a.tools, a.compact)) for c in train_cases]

    work = a.workdir or Path(tempfile.mkdtemp(prefix="tiny-calib-"))
    base = work / "base"
    t0 = time.perf_counter()
    build_tiny_model(row_texts(rows), base, seed=a.seed, hidden_size=a.hidden, num_layers=a.layers,
                     num_heads=a.heads, vocab_size=a.vocab, intermediate_size=a.intermediate or None,
                     rope_theta=a.rope_theta, initializer_range=a.init_std or None)
    build_seconds = time.perf_counter() - t0

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    lengths = [count_row_tokens(tok, r) for r in rows]
    probe = make_probe(test_cases[:20], a.tools, a.compact, a.probe_every)
    probe.tokenizer = tok
    result = train_sft(base, rows, work / "sft", epochs=1.0, learning_rate=a.lr, batch_size=a.batch,
                       seed=a.seed, lora=False, lora_rank=0, max_length=a.max_length, max_steps=a.steps,
                       progress=not a.quiet, log_every=50, lr_scheduler_type=a.scheduler,
                       warmup_ratio=a.warmup, weight_decay=a.weight_decay, callbacks=[probe])
    scores = evaluate(work / "sft", test_cases, a.tools, a.compact)
    from transformers import AutoModelForCausalLM

    n_params = AutoModelForCausalLM.from_pretrained(work / "sft", use_safetensors=True).num_parameters()
    summary = {
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "params": n_params,
        "vocab_len": len(tok),
        "row_tokens": {"min": min(lengths), "mean": round(sum(lengths) / len(lengths), 1), "max": max(lengths)},
        "build_seconds": round(build_seconds, 1),
        "train_seconds": round(result.train_seconds - probe.seconds, 1),
        "optimizer_steps": result.optimizer_steps,
        "steps_per_second": round(result.optimizer_steps / (result.train_seconds - probe.seconds), 2),
        "tokens_per_second": round(sum(lengths) * result.optimizer_steps * a.batch / len(rows)
                                   / (result.train_seconds - probe.seconds)),
        "probe_curve": probe.curve,
        "loss_first_last": [result.loss_history[0], result.loss_history[-1]] if result.loss_history else None,
        **scores,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
