"""GRPO on local-torch: the world is the environment, the task's VCode verdict is the reward.

Why our own loop rather than TRL's ``GRPOTrainer``: a reward here is a verdict on a whole
multi-turn episode (the tool calls made, the state they left behind, the final answer), executed
by the world's hardened executor on an isolated copy of the seed. TRL's ``environment_factory``
derives tool schemas from Python signatures (they would not be byte-identical to the kit's),
stringifies results, runs its own tool-call parser and counts budgets in completions rather than
model calls; its ``rollout_func`` would leave us writing the same loop plus glue. The loop below
is small, seeded and on-policy:

* each step draws ``batch_size // group_size`` training prompts; every prompt gets
  ``group_size`` sampled episodes (``run_episode``: parse the chat template's tool-call format,
  validate against the declared JSON Schemas, execute, feed the observation back as a tool
  message, stop at a final answer or the turn cap);
* reward = 1 if VCode passes the episode, else 0 (a verifier *error* is counted, never rewarded);
  no shaping terms;
* advantage = reward - group mean (mean-centred, not divided by the group std, as in the Tinker
  cookbook / Dr. GRPO; with two attempts the std only rescales the step);
* loss = -sum(advantage * log p(token)) over the tokens the model generated, divided by the
  number of those tokens. Observation tokens are prompt tokens of the next turn and carry no loss.
  One optimizer update per step, on the samples just drawn, so the importance ratio is 1 and no
  clipping or reference model is needed (beta = 0, TRL's default too). Steps whose groups all have
  zero reward variance carry no signal and apply no update (recorded).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from blobkit.canonical import atomic_write_json, atomic_write_text, canonical_json
from blobkit.errors import ConfigError, TrainerError
from blobkit.kitfiles import Kit

from .config import TrainConfig
from .episode import run_episode
from .generation import Decoded, decode, prompt_ids, stop_ids, turn_text

Log = Callable[[str], None]
Stop = Callable[[], str | None]


class Policy(Protocol):
    """Anything that writes assistant turns for ``run_episode`` and keeps the turns' token ids."""

    turns: list[Decoded]

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str: ...


@dataclass
class Sampler:
    """A sampling policy for ``run_episode`` that keeps the exact token ids of every turn it produced."""

    model: Any
    tokenizer: Any
    max_new_tokens: int
    temperature: float
    generator: Any
    turns: list[Decoded] = field(default_factory=list)

    def __call__(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        decoded = decode(self.model, prompt_ids(self.tokenizer, messages, tools), stop_ids(self.tokenizer),
                         max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                         generator=self.generator)
        self.turns.append(decoded)
        return turn_text(self.tokenizer, decoded.new_ids)


@dataclass
class Rollout:
    """One sampled episode: its turns' token ids, the episode record and the reward."""

    case_id: str
    turns: list[Decoded]
    episode: dict[str, Any]
    reward: float
    verifier_error: bool


def rl_cases(kit: Kit, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Training prompts for RL: each SFT row's system + user messages and tools, with its case's task.

    Built from the SFT rows themselves, so the tool schemas the model sees in RL are the very
    objects it saw in SFT.
    """
    tasks = {case["case_id"]: case for case in kit.jsonl("train_cases.jsonl")}
    cases = []
    for row in rows:
        case_id = (row.get("metadata") or {}).get("case_id")
        if case_id not in tasks:
            continue
        case = tasks[case_id]
        cases.append({"case_id": case_id, "template": case["template"], "task": case["task"],
                      "prompt": {"messages": row["messages"][:2], "tools": row["tools"]}})
    if not cases:
        raise ConfigError("no SFT row matches a training case of the kit: nothing to run RL on")
    return cases


def assert_same_tools(rows: list[dict[str, Any]], cases: list[dict[str, Any]]) -> None:
    """The tool schemas of every RL and evaluation prompt must be byte-identical to the SFT rows'."""
    seen = {canonical_json(row["tools"]) for row in rows}
    for case in cases:
        if canonical_json(case["prompt"]["tools"]) not in seen:
            raise TrainerError(f"case {case['case_id']}: its tool schemas differ from those in the SFT rows")


def rollout(policy: Policy, runtime: Any, case: dict[str, Any], max_turns: int) -> Rollout:
    """Run one episode on an isolated copy of the seed and score it: reward 1 iff VCode passes.

    A verifier error is recorded on the rollout and rewarded 0, never 1.
    """
    policy.turns = []
    episode = run_episode(policy, runtime, case, max_turns)
    error = episode["verdict"]["outcome"] == "error"
    return Rollout(case["case_id"], list(policy.turns), episode, 1.0 if episode["passed"] else 0.0, error)


def advantages(rewards: list[float], group_size: int) -> list[float]:
    """Reward minus its group's mean (groups are consecutive runs of ``group_size``)."""
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size]
        mean = sum(group) / len(group)
        out.extend(r - mean for r in group)
    return out


def policy_loss(model: Any, rollouts: list[Rollout], weights: list[float]) -> tuple[Any, int]:
    """Backpropagate -sum(w * log p(generated tokens)) / n_tokens; return (loss, n_tokens)."""
    import torch

    device = next(model.parameters()).device
    n_tokens = sum(len(turn.new_ids) for r, w in zip(rollouts, weights, strict=True) if w for turn in r.turns)
    total = torch.zeros((), device=device)
    for item, weight in zip(rollouts, weights, strict=True):
        if not weight:
            continue
        for turn in item.turns:
            if not turn.new_ids:
                continue
            ids = torch.tensor([turn.prompt_ids + turn.new_ids], device=device)
            logits = model(input_ids=ids).logits[0, len(turn.prompt_ids) - 1:-1].float()
            logp = torch.log_softmax(logits, dim=-1)
            chosen = logp.gather(1, torch.tensor(turn.new_ids, device=device)[:, None]).sum()
            loss = -weight * chosen / max(n_tokens, 1)
            loss.backward()
            total = total + loss.detach()
    return total, n_tokens


@dataclass
class Budget:
    """Model-call, wall-clock and caller-supplied stop conditions, checked between steps."""

    max_model_calls: int | None
    max_minutes: float | None
    stop: Stop | None
    started: float = field(default_factory=time.monotonic)
    model_calls: int = 0

    def exhausted(self, next_step_calls: int) -> str | None:
        """Why the next step must not start (it could exceed a budget), or None."""
        if self.stop is not None:
            reason = self.stop()
            if reason:
                return reason
        if self.max_model_calls is not None and self.model_calls + next_step_calls > self.max_model_calls:
            return "max_model_calls"
        if self.max_minutes is not None and (time.monotonic() - self.started) / 60 >= self.max_minutes:
            return "max_minutes"
        return None


def _load_policy(config: TrainConfig, plan_record: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """(trainable model, tokenizer, base record of the RL adapter) from --init-adapter or the base."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .export import verify_export

    def fresh_lora(model: Any) -> Any:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            return get_peft_model(model, LoraConfig(r=config.lora_rank, lora_alpha=2 * config.lora_rank,
                                                    target_modules="all-linear", task_type="CAUSAL_LM",
                                                    lora_dropout=0.0))

    if config.init_adapter is None:
        base = plan_record["base"]
        tokenizer = AutoTokenizer.from_pretrained(base["name_or_path"])
        model = AutoModelForCausalLM.from_pretrained(base["name_or_path"], use_safetensors=True)
        return fresh_lora(model), tokenizer, base
    manifest = verify_export(config.init_adapter)
    tokenizer = AutoTokenizer.from_pretrained(config.init_adapter)
    if manifest["kind"] == "full":
        model = AutoModelForCausalLM.from_pretrained(config.init_adapter, use_safetensors=True)
        base = {"source": "local", "name_or_path": str(Path(config.init_adapter).resolve()), "revision": None}
        return fresh_lora(model), tokenizer, base
    base = manifest["base"]
    model = AutoModelForCausalLM.from_pretrained(base["name_or_path"], use_safetensors=True,
                                                 revision=None if base["source"] == "local" else base["revision"])
    return PeftModel.from_pretrained(model, config.init_adapter, is_trainable=True), tokenizer, base


def _step_record(step: int, rollouts: list[Rollout], group_size: int, updated: bool, loss: float,
                 calls: int, seconds: float) -> dict[str, Any]:
    rewards = [r.reward for r in rollouts]
    groups = [rewards[i:i + group_size] for i in range(0, len(rewards), group_size)]
    return {
        "step": step, "episodes": len(rollouts), "reward_mean": round(sum(rewards) / len(rewards), 4),
        "zero_variance_groups": round(sum(1 for g in groups if max(g) == min(g)) / len(groups), 4),
        "tool_call_parse_failures": sum(r.episode["parse_failures"] for r in rollouts),
        "episode_turns_mean": round(sum(r.episode["turns"] for r in rollouts) / len(rollouts), 3),
        "verifier_errors": sum(r.verifier_error for r in rollouts),
        "optimizer_update": updated, "loss": round(loss, 6), "model_calls": calls, "seconds": round(seconds, 2),
    }


def train_grpo(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: dict[str, Any], log: Log,
               stop: Stop | None = None) -> dict[str, Any]:
    """Run GRPO, export the adapter, evaluate SFT (the start point) and RL on the held-out cases."""
    import torch

    from .export import export_model
    from .local_torch import _canonicalise_adapter_config
    from .pipeline import _evaluate

    loaded = kit.world()
    train_cases = rl_cases(kit, rows)
    eval_cases = kit.jsonl("eval_cases.jsonl")[: config.eval_limit]
    assert_same_tools(rows, train_cases + eval_cases)
    model, tokenizer, base = _load_policy(config, plan_record)
    start_label = "sft" if config.init_adapter is not None else "base"
    start_eval, _ = _evaluate(model, tokenizer, loaded, eval_cases, config, log, start_label)

    prompts_per_step = max(1, config.batch_size // config.group_size)
    step_calls = prompts_per_step * config.group_size * config.max_turns
    order = random.Random(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    sampler = Sampler(model, tokenizer, config.max_new_tokens, config.temperature, generator)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.learning_rate,
                                  weight_decay=0.0)
    budget = Budget(config.max_model_calls, config.max_minutes, stop)
    steps: list[dict[str, Any]] = []
    stopped_by: str | None = None
    updates = 0
    runtime = loaded.runtime()
    try:
        for step in range(1, config.steps + 1):
            stopped_by = budget.exhausted(step_calls)
            if stopped_by:
                log(f"GRPO stopped before step {step}: {stopped_by}")
                break
            started = time.monotonic()
            chosen = order.sample(train_cases, min(prompts_per_step, len(train_cases)))
            rollouts = [rollout(sampler, runtime, case, config.max_turns)
                        for case in chosen for _ in range(config.group_size)]
            calls = sum(len(r.turns) for r in rollouts)
            budget.model_calls += calls
            weights = advantages([r.reward for r in rollouts], config.group_size)
            updated, loss_value = False, 0.0
            if any(weights):
                model.train()
                optimizer.zero_grad(set_to_none=True)
                loss, _ = policy_loss(model, rollouts, weights)
                torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
                optimizer.step()
                updated, loss_value = True, float(loss)
                updates += 1
            record = _step_record(step, rollouts, config.group_size, updated, loss_value, calls,
                                  time.monotonic() - started)
            steps.append(record)
            atomic_write_text(config.out / "rl_steps.jsonl", "".join(canonical_json(s) + "\n" for s in steps))
            log(f"GRPO step {step}/{config.steps}: reward {record['reward_mean']:.2f}, zero-variance groups "
                f"{record['zero_variance_groups']:.2f}, update {'yes' if updated else 'no'}, {calls} model calls")
    finally:
        runtime.close()

    checkpoint = config.out / "checkpoint"
    checkpoint.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(checkpoint, safe_serialization=True)
    _canonicalise_adapter_config(checkpoint / "adapter_config.json")
    tokenizer.save_pretrained(checkpoint)
    config_json = json.loads(config.model_dump_json())
    export = export_model(checkpoint, config.out / "export", kind="lora", config=config_json, base=base,
                          kit_sha256=kit.sha256)
    from .export import load_export

    del model
    reloaded, tokenizer, _ = load_export(export)
    rl_eval, rl_results = _evaluate(reloaded, tokenizer, loaded, eval_cases, config, log, "rl")
    evals = {start_label: start_eval, "rl": rl_eval}
    previous = _previous_eval(config)
    if "base" in previous and start_label != "base":
        evals = {"base": previous["base"], **evals}
    zero_variance = [s["zero_variance_groups"] for s in steps]
    report = {
        **evals,
        f"rl_minus_{start_label}": {"pass_rate": round(rl_eval["pass_rate"] - start_eval["pass_rate"], 4),
                                    "cases": rl_eval["cases"]},
        "optimizer_updates": updates, "steps_completed": len(steps), "steps_planned": config.steps,
        "stopped_by": stopped_by, "model_calls": budget.model_calls,
        "eval_model_calls": start_eval["model_calls"] + rl_eval["model_calls"],
        "active_seconds": round(time.monotonic() - budget.started, 1),
        "zero_variance_group_fraction": round(sum(zero_variance) / len(zero_variance), 4) if steps else None,
        "reward_history": [[s["step"], s["reward_mean"]] for s in steps],
        "kit_sha256": kit.sha256, "group_size": config.group_size, "shaping": None,
    }
    atomic_write_json(config.out / "eval.json", report)
    atomic_write_json(config.out / "eval_cases_rl.json", rl_results)
    from .pipeline import plot_training

    plot_training(config.out / "training.png", [(s["step"], s["reward_mean"]) for s in steps], evals,
                  title="GRPO reward per step", ylabel="mean reward")
    return report


def _previous_eval(config: TrainConfig) -> dict[str, Any]:
    """The SFT run's eval.json next to --init-adapter (for its base figures), if there is one."""
    if config.init_adapter is None:
        return {}
    path = Path(config.init_adapter).resolve().parent / "eval.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
