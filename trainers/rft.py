"""RFT: rejection-sampling fine-tuning from an SFT export, the world as environment and the verifier as the filter.

From the ``--init-adapter`` export (an SFT run's), sample ``--rft-samples`` k episodes of every training case at
``--rft-temperature``: the same episode loop, prompts and tool schemas as GRPO's rollouts
(:func:`trainers.grpo.rl_cases`, :func:`trainers.grpo.rollouts`: parse the tool calls, execute them on an isolated
copy of the seed, the scripted customer, the turn cap) and the same verdict as held-out evaluation (the case's
VCode and the world's procedures). Keep the passed episodes that are training rows, each distinct conversation
once (:mod:`trainers.rft_select`; with ``--rft-fill reference`` a sampled case with none kept contributes its kit
row instead), and train on them with the SFT recipe of the config (:func:`trainers.sft_torch.
fit_rows`), continuing the export's LoRA adapter (a full export: a fresh seeded LoRA on it, or every weight with
``--full``). Xiong et al., "A Minimalist Approach to LLM Reasoning: from Rejection Sampling to Reinforce"
(arXiv 2504.11343), find this close to GRPO.

The run skeleton evaluates the SFT export (the start) and the reloaded RFT export on the same held-out cases;
eval.json (:class:`~trainers.eval_record.RFTReport`) carries both, ``rft_minus_sft`` with the paired comparison,
and ``sampling``: episodes sampled, passed, unusable, duplicated and kept. The run also writes
``rft_sampling.json`` (that record), ``rft_episodes.jsonl`` (one line per sampled episode: case, sample, verdict)
and ``rft_rows.jsonl`` (the rows trained on, in order). When no episode is kept the run stops with a TrainerError
after writing those files (there is nothing to train on; eval.json and an export are not written).

Sampling polls the budget before each group of cases (``--max-model-calls`` counts the sampled turns,
``--max-minutes`` and a cancellation too); a stopped sampling trains on what it kept, and the SFT steps poll the
budget at every optimizer step as SFT's do.
"""

from __future__ import annotations

import time
from typing import Any

from world_format.canonical import atomic_write_bytes, atomic_write_json, jsonl_bytes
from world_format.kit import Kit, KitCase

from .budget import Budget, Log
from .config import TrainConfig
from .errors import ConfigError, TrainerError
from .eval_record import Delta, RFTReport, RFTSampling
from .evaluation import EvalSummary, turn_constraint
from .fit import FitResult
from .grounding import with_grounding_repeats
from .grpo import PolicySource, assert_same_tools, policy_source, previous_eval, rl_cases, rl_rows, rollouts
from .plan_record import PlanRecord
from .report import paired
from .rft_select import SampledEpisode, Selected, select


def rft_cases(kit: Kit, rows: list[dict[str, Any]]) -> list[KitCase]:
    """The training cases RFT samples, each once, in the rows' order (:func:`trainers.grpo.rl_cases`)."""
    seen: dict[str, KitCase] = {}
    for case in rl_cases(kit, rows):
        seen.setdefault(case.case_id, case)
    return list(seen.values())


def reference_rows(kit: Kit, rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The kit row of each case RFT samples (case id → its first SFT row, :func:`trainers.grpo.rl_rows`): what
    ``--rft-fill reference`` trains on for a case whose sampled episodes were not kept."""
    found: dict[str, dict[str, Any]] = {}
    for row, case in rl_rows(kit, rows):
        found.setdefault(case.case_id, row)
    return found


def load_rft_policy(source: PolicySource, config: TrainConfig) -> tuple[Any, Any]:
    """(trainable model, tokenizer) of the SFT export: its adapter, trainable; a full export with a fresh seeded LoRA
    (:func:`trainers.grpo_torch.load_torch_policy`), or as it is with ``--full`` (every weight trained)."""
    from .grpo_torch import load_torch_policy

    if source.adapter is not None and config.full:
        raise ConfigError(f"--init-adapter {config.init_adapter} is a LoRA export: RFT trains its adapter further; "
                          "drop --full (or start from a full SFT export)")
    if source.adapter is not None or not config.full:
        return load_torch_policy(source, config)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .base_identity import pinned_base_path
    from .formats import apply_tool_format

    tokenizer = AutoTokenizer.from_pretrained(source.tokenizer)
    apply_tool_format(tokenizer, config.tool_format, where=source.tokenizer)
    return AutoModelForCausalLM.from_pretrained(pinned_base_path(source.base), use_safetensors=True), tokenizer


def _sampler(model: Any, tokenizer: Any, config: TrainConfig, world: Any) -> Any:
    """Turns sampled at ``rft_temperature`` from a torch generator seeded with ``config.seed``, decoded
    ``episode_batch`` at a time, constrained as ``config.decoding`` says."""
    import torch

    from .episode_decode import ModelTurns
    from .formats import format_of

    fmt = format_of(tokenizer)
    return ModelTurns(model, tokenizer, config.token_cap, config.rft_temperature,
                      torch.Generator().manual_seed(config.seed), slots=config.episode_batch, tool_format=fmt,
                      constraint=turn_constraint(config.decoding, tokenizer, fmt, world))


def _episode_line(item: SampledEpisode) -> dict[str, Any]:
    episode = item.episode
    return {"case_id": item.case.case_id, "sample": item.sample, "passed": episode.passed,
            "verdict": episode.verdict.outcome, "reason": episode.verdict.reason, "turns": episode.turns,
            "parse_failures": episode.parse_failures}


class RFTTrainer:
    """RFT on local-torch for the run skeleton: the SFT export is the start policy; sample, select, fit."""

    start_label, end_label = "sft", "rft"

    def __init__(self, config: TrainConfig, kit: Kit, rows: list[dict[str, Any]],
                 plan_record: PlanRecord) -> None:
        if config.init_adapter is None:
            raise ConfigError("--method rft needs --init-adapter: the export of the SFT run it samples from")
        self.config, self.kit = config, kit
        self.cases = rft_cases(kit, rows)
        self.fill = reference_rows(kit, rows) if config.rft_fill == "reference" else {}
        assert_same_tools(rows, self.cases + kit.cases("eval")[: config.eval_limit])
        self.source = policy_source(config, plan_record)
        self.model, self.tokenizer = load_rft_policy(self.source, config)

    def start_policy(self) -> tuple[Any, Any]:
        """The SFT export RFT samples from and trains further (evaluated before any update)."""
        return self.model, self.tokenizer

    def sample(self, budget: Budget, log: Log) -> tuple[list[SampledEpisode], Selected, RFTSampling]:
        """k episodes of every training case (several cases decoded together), scored; the selection of them."""
        config, k, started = self.config, self.config.rft_samples, time.monotonic()
        per_call = max(1, config.episode_batch // k)
        runtime = self.kit.world().runtime()
        sampled: list[SampledEpisode] = []
        try:
            sampler = _sampler(self.model, self.tokenizer, config, runtime.world)
            for first in range(0, len(self.cases), per_call):
                chunk = self.cases[first:first + per_call]
                if budget.exhausted(len(chunk) * k * config.turn_cap):
                    log(f"RFT sampling stopped after {first} of {len(self.cases)} cases: {budget.stopped_by}")
                    break
                episodes = [case for case in chunk for _ in range(k)]
                for index, item in enumerate(rollouts(sampler, runtime, episodes, config.turn_cap)):
                    sampled.append(SampledEpisode(episodes[index], index % k, item.episode))
                    budget.model_calls += item.episode.turns
                log(f"RFT sampled {first + len(chunk)}/{len(self.cases)} cases: "
                    f"{sum(s.episode.passed for s in sampled)} of {len(sampled)} episodes passed")
            selected = select(sampled, runtime, config.seed, self.fill)
        finally:
            runtime.close()
        record = RFTSampling(**selected.counts.model_dump(), samples_per_case=k, temperature=config.rft_temperature,
                             cases=len({s.case.case_id for s in sampled}), cases_planned=len(self.cases),
                             model_calls=sum(s.episode.turns for s in sampled),
                             seconds=round(time.monotonic() - started, 1))
        return sampled, selected, record

    def fit(self, budget: Budget, log: Log) -> FitResult:
        """Sample and select (the files written), then SFT on the kept rows from the export; the checkpoint also holds
        the resolved config. TrainerError when no episode was kept."""
        from .sft_torch import fit_rows, loss_log

        config, out = self.config, self.config.out
        sampled, selected, record = self.sample(budget, log)
        atomic_write_json(out / "rft_sampling.json", record.to_json())
        atomic_write_bytes(out / "rft_episodes.jsonl", jsonl_bytes(_episode_line(s) for s in sampled))
        atomic_write_bytes(out / "rft_rows.jsonl", jsonl_bytes(selected.rows))
        log(f"RFT kept {record.kept} distinct episodes of {record.passed} passed / {record.episodes} sampled "
            f"({record.duplicates} duplicates, {record.unusable} unusable) over {record.cases_kept} cases"
            + (f"; {record.reference_rows} cases with none kept train on their kit row" if config.rft_fill ==
               "reference" else ""))
        if not selected.rows:
            raise TrainerError(f"RFT kept no episode: {record.passed} of {record.episodes} sampled episodes "
                               f"({config.rft_samples} per case over {record.cases} training cases) passed the "
                               "verifier as a usable row, so there is nothing to train on "
                               f"({out / 'rft_sampling.json'} has the counts); sample more (--rft-samples), at "
                               "another --rft-temperature, or start from a stronger SFT export")
        rows = with_grounding_repeats(selected.rows, config.grounding_repeats, config.answer_quote_repeats)
        checkpoint = out / "checkpoint"
        result = fit_rows(self.model, self.tokenizer, rows, checkpoint, config, stop=budget.step_stop,
                          callbacks=[loss_log(log)])
        atomic_write_json(checkpoint / "train_config.json", config.as_json())
        del self.model
        return FitResult(checkpoint, result.kind, self.source.base, result.optimizer_steps, result.train_seconds,
                         result.loss_history, budget.stopped_by, {"sampling": record})

    def report(self, start: EvalSummary, end: EvalSummary, fit: FitResult) -> RFTReport:
        """The SFT start and RFT on the same held-out cases, with the sampling's figures."""
        previous = previous_eval(self.config)
        sampling: RFTSampling = fit.details["sampling"]
        delta = Delta(pass_rate=round(end.pass_rate - start.pass_rate, 4), cases=len(end.results),
                      paired=paired(start, end, "sft", "rft"))
        return RFTReport(base=getattr(previous, "base", None), sft=start.record(), rft=end.record(),
                         rft_minus_sft=delta, sampling=sampling, train_seconds=round(fit.train_seconds, 1),
                         loss_history=fit.history, optimizer_updates=fit.optimizer_updates, stopped_by=fit.stopped_by,
                         model_calls=sampling.model_calls, eval_model_calls=start.model_calls + end.model_calls,
                         kit_sha256=self.kit.sha256)

