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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from world_format.canonical import atomic_write_text, canonical_json
from world_format.kit import Kit, KitCase, Prompt

from .budget import Budget, Log
from .config import TrainConfig
from .errors import ConfigError, TrainerError
from .evaluation import EpisodeResult, EvalSummary, run_episode
from .export import verify_export
from .fit import FitResult
from .generation import Decoded, decode, prompt_ids, stop_ids, turn_text
from .lora import peft_lora_config
from .sft_torch import canonicalise_adapter_config


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
    """One sampled episode (a trajectory): its turns' token ids, the episode and the reward."""

    case_id: str
    turns: list[Decoded]
    episode: EpisodeResult
    reward: float
    verifier_error: bool


def rl_cases(kit: Kit, rows: list[dict[str, Any]]) -> list[KitCase]:
    """Training prompts for RL: each SFT row's system + user messages and tools, with its case's task.

    Built from the SFT rows themselves, so the tool schemas the model sees in RL are the very
    objects it saw in SFT.
    """
    tasks = {case.case_id: case for case in kit.cases("train")}
    cases = []
    for row in rows:
        case_id = (row.get("metadata") or {}).get("case_id")
        if case_id not in tasks:
            continue
        prompt = Prompt(messages=row["messages"][:2], tools=row["tools"])
        cases.append(tasks[case_id].model_copy(update={"prompt": prompt}))
    if not cases:
        raise ConfigError("no SFT row matches a training case of the kit: nothing to run RL on")
    return cases


def assert_same_tools(rows: list[dict[str, Any]], cases: list[KitCase]) -> None:
    """The tool schemas of every RL and evaluation prompt must be byte-identical to the SFT rows'."""
    seen = {canonical_json(row["tools"]) for row in rows}
    for case in cases:
        if case.prompt is None or canonical_json(case.prompt.tools) not in seen:
            raise TrainerError(f"case {case.case_id}: its tool schemas differ from those in the SFT rows")


def rollout(policy: Policy, runtime: Any, case: KitCase, max_turns: int) -> Rollout:
    """Run one episode on an isolated copy of the seed and score it: reward 1 iff VCode passes.

    A verifier error is recorded on the rollout and rewarded 0, never 1.
    """
    policy.turns = []
    episode = run_episode(policy, runtime, case, max_turns)
    error = episode.verdict.outcome == "error"
    return Rollout(case.case_id, list(policy.turns), episode, 1.0 if episode.passed else 0.0, error)


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


def _load_policy(config: TrainConfig, plan_record: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """(trainable model, tokenizer, base record of the RL adapter) from --init-adapter or the base."""
    import torch
    from peft import PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def fresh_lora(model: Any) -> Any:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            return get_peft_model(model, peft_lora_config(config.lora_rank))

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
        "tool_call_parse_failures": sum(r.episode.parse_failures for r in rollouts),
        "episode_turns_mean": round(sum(r.episode.turns for r in rollouts) / len(rollouts), 3),
        "verifier_errors": sum(r.verifier_error for r in rollouts),
        "optimizer_update": updated, "loss": round(loss, 6), "model_calls": calls, "seconds": round(seconds, 2),
    }


class GRPOTrainer:
    """GRPO on local-torch for the run skeleton: the warm-start (or base) policy is both the start and the fit."""

    end_label = "rl"

    def __init__(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                 plan_record: dict[str, Any]) -> None:
        self.config, self.kit = config, kit
        self.cases = rl_cases(kit, rows)
        assert_same_tools(rows, self.cases + kit.cases("eval")[: config.eval_limit])
        self.model, self.tokenizer, self.base = _load_policy(config, plan_record)
        self.start_label = "sft" if config.init_adapter is not None else "base"
        self.steps: list[dict[str, Any]] = []

    def start_policy(self) -> tuple[Any, Any]:
        """The policy GRPO will train, before any update."""
        return self.model, self.tokenizer

    def _step(self, step: int, sampler: Sampler, optimizer: Any, order: random.Random, runtime: Any) -> dict[str, Any]:
        """One GRPO step: sample a group of rollouts per prompt, one policy-gradient update when any group varies."""
        import torch

        config, started = self.config, time.monotonic()
        prompts = max(1, config.batch_size // config.group_size)
        chosen = order.sample(self.cases, min(prompts, len(self.cases)))
        rollouts = [rollout(sampler, runtime, case, config.max_turns) for case in chosen
                    for _ in range(config.group_size)]
        weights = advantages([r.reward for r in rollouts], config.group_size)
        updated, loss_value = False, 0.0
        if any(weights):
            self.model.train()
            optimizer.zero_grad(set_to_none=True)
            loss, _ = policy_loss(self.model, rollouts, weights)
            torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], 1.0)
            optimizer.step()
            updated, loss_value = True, float(loss)
        calls = sum(len(r.turns) for r in rollouts)
        return _step_record(step, rollouts, config.group_size, updated, loss_value, calls, time.monotonic() - started)

    def fit(self, budget: Budget, log: Log) -> FitResult:
        """Up to ``steps`` steps, each started only when its worst case fits the budget; rl_steps.jsonl as it goes."""
        import torch

        config = self.config
        step_calls = max(1, config.batch_size // config.group_size) * config.group_size * config.max_turns
        generator = torch.Generator().manual_seed(config.seed)
        sampler = Sampler(self.model, self.tokenizer, config.max_new_tokens, config.temperature, generator)
        optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad],
                                      lr=config.learning_rate, weight_decay=config.weight_decay)
        order, runtime = random.Random(config.seed), self.kit.world().runtime()
        try:
            for step in range(1, config.steps + 1):
                if budget.exhausted(step_calls):
                    log(f"GRPO stopped before step {step}: {budget.stopped_by}")
                    break
                record = self._step(step, sampler, optimizer, order, runtime)
                budget.model_calls += record["model_calls"]
                self.steps.append(record)
                atomic_write_text(config.out / "rl_steps.jsonl", "".join(canonical_json(s) + "\n" for s in self.steps))
                log(f"GRPO step {step}/{config.steps}: reward {record['reward_mean']:.2f}, zero-variance groups "
                    f"{record['zero_variance_groups']:.2f}, update {'yes' if record['optimizer_update'] else 'no'}, "
                    f"{record['model_calls']} model calls")
        finally:
            runtime.close()
        return self._checkpoint(budget)

    def _checkpoint(self, budget: Budget) -> FitResult:
        checkpoint = self.config.out / "checkpoint"
        checkpoint.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(checkpoint, safe_serialization=True)
        canonicalise_adapter_config(checkpoint / "adapter_config.json")
        self.tokenizer.save_pretrained(checkpoint)
        del self.model
        zero_variance = [s["zero_variance_groups"] for s in self.steps]
        details = {"steps_completed": len(self.steps), "model_calls": budget.model_calls,
                   "active_seconds": round(budget.minutes() * 60, 1),
                   "zero_variance_group_fraction": round(sum(zero_variance) / len(zero_variance), 4)
                   if self.steps else None}
        return FitResult(checkpoint, "lora", self.base, sum(s["optimizer_update"] for s in self.steps),
                         budget.minutes() * 60, [(s["step"], s["reward_mean"]) for s in self.steps],
                         budget.stopped_by, details)

    def report(self, start: EvalSummary, end: EvalSummary, fit: FitResult) -> dict[str, Any]:
        """The start policy and RL on the same held-out cases, with the rollout figures."""
        config, label = self.config, self.start_label
        evals = {label: start.to_json(), "rl": end.to_json()}
        previous = _previous_eval(config)
        if "base" in previous and label != "base":
            evals = {"base": previous["base"], **evals}
        return {
            **evals,
            f"rl_minus_{label}": {"pass_rate": round(end.pass_rate - start.pass_rate, 4), "cases": len(end.results)},
            "optimizer_updates": fit.optimizer_updates, "steps_completed": fit.details["steps_completed"],
            "steps_planned": config.steps, "stopped_by": fit.stopped_by, "model_calls": fit.details["model_calls"],
            "eval_model_calls": start.model_calls + end.model_calls, "active_seconds": fit.details["active_seconds"],
            "zero_variance_group_fraction": fit.details["zero_variance_group_fraction"],
            "reward_history": [[step, reward] for step, reward in fit.history],
            "kit_sha256": self.kit.sha256, "group_size": config.group_size, "shaping": None,
        }


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
