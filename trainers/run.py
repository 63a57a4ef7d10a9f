"""The one run skeleton every local method and target plugs into.

    evaluate the start policy → fit → export → (merge) → reload the export → evaluate → report

A :class:`Trainer` supplies the start policy (the base for SFT, the warm-start adapter for GRPO),
its ``fit`` (torch SFT, mlx SFT, GRPO on torch or mlx) and its report; the skeleton owns everything around them:
the held-out cases, the :class:`~trainers.budget.Budget` (``--max-minutes``, ``--max-model-calls``,
cancellation) that every fit polls at its step boundaries, the export with its manifest, the
reload from disk and the evaluation of exactly what was exported, and the files every run writes
(``eval.json``, ``eval_cases_<label>.json``, every evaluated conversation in ``eval_cases_<label>.jsonl``,
``training.png``, and the export's model card, :mod:`trainers.model_card`).
"""

from __future__ import annotations

import time
from typing import Any

from world_format.canonical import atomic_write_bytes, atomic_write_json, jsonl_bytes
from world_format.kit import Kit, KitCase
from world_format.loaded import LoadedWorld

from .budget import Budget, Log, Stop
from .config import TrainConfig
from .episode_limit import episode_limit
from .errors import TargetUnavailableError
from .eval_record import LeftOut, TrainingReport
from .evaluation import EvalSummary, evaluate_cases, model_policy
from .export import export_model, load_export, merge_export, verify_export
from .fit import Trainer
from .intervals import rate_text
from .model_card import add_model_card, model_card
from .pass_k import PassK
from .plan_record import PlanRecord
from .report import plot_training
from .targets.registry import target_for
from .tokenizable import Tokenizable, tokenizable_cases


def evaluate_policy(model: Any, tokenizer: Any, loaded: LoadedWorld, cases: list[KitCase], config: TrainConfig,
                    log: Log, label: str, universe: list[KitCase] | None = None) -> EvalSummary:
    """Greedy episodes of every case on isolated copies of the seed, in the tool format ``tokenizer`` carries;
    log and return the summary (its coverage stated against ``universe``, the kit's held-out side)."""
    runtime = loaded.runtime()
    try:
        started = time.monotonic()
        policy = model_policy(model, tokenizer, config.token_cap, config.episode_batch,
                              decoding=config.decoding, world=loaded.world)
        summary = evaluate_cases(policy, runtime, cases, config.turn_cap, universe=universe)
    finally:
        runtime.close()
    log(f"{label}: held-out pass rate {rate_text(summary.to_json())} ({time.monotonic() - started:.0f}s)")
    return summary


def conversations(summary: EvalSummary, label: str) -> bytes:
    """Every evaluated conversation as JSON Lines ``{"case_id", "agent", "messages"}`` in the kit's row format:
    ``OUT/eval_cases_<label>.jsonl``, which ``blobkit eval --trajectories`` scores again."""
    return jsonl_bytes({"case_id": r.case_id, "agent": label, "messages": list(r.messages)} for r in summary.results)


def _tokenizable(cases: list[KitCase], loaded: LoadedWorld, tokenizer: Any, log: Log) -> Tokenizable:
    """The held-out cases a model on ``tokenizer`` can pass at all (:mod:`trainers.tokenizable`); the rest logged."""
    runtime = loaded.runtime()
    try:
        found = tokenizable_cases(cases, runtime, tokenizer)
    finally:
        runtime.close()
    if found.left_out:
        log(f"left out {len(found.left_out)} held-out case(s) whose required text the tokenizer cannot write back "
            f"unchanged (first: {next(iter(found.left_out.items()))})")
    return found


def _pass_k(model: Any, tokenizer: Any, loaded: LoadedWorld, cases: list[KitCase], config: TrainConfig,
            log: Log) -> PassK:
    """pass^k of the exported model beside its pass@1 (:mod:`trainers.pass_k`), as eval.json records it."""
    from .pass_k import evaluate_pass_k

    runtime = loaded.runtime()
    try:
        record = evaluate_pass_k(model, tokenizer, runtime, cases, config, loaded.world, log)
    finally:
        runtime.close()
    log(f"sampled: {record.text()}")
    return record


def run_training(config: TrainConfig, kit: Kit, rows: list[dict[str, Any]], plan_record: PlanRecord,
                 log: Log, stop: Stop | None = None) -> TrainingReport:
    """Run a validated, planned run on its target (:meth:`trainers.targets.base.Target.run`); every target returns
    (and writes) the eval.json record.

    ``stop`` is polled at every step boundary together with the config's budgets; training then
    ends at that boundary, the partial model is still exported and evaluated, and ``stopped_by``
    says why. The turn cap is resolved against the kit first (:func:`trainers.episode_limit.episode_limit`, as the
    plan did) and the token cap taken from the plan (:mod:`trainers.turn_tokens`; a plan made without the base's
    tokenizer leaves it to the run where the base is), so the trainers, the export's config and every evaluation
    use the same ones.
    """
    refusal = config.unsupported()
    if refusal:
        raise TargetUnavailableError(refusal)
    config, _ = episode_limit(config, kit)
    if config.max_new_tokens is None:
        config = config.model_copy(update={"max_new_tokens": plan_record.config.max_new_tokens})
    return target_for(config.target).run(config, kit, rows, plan_record, log, stop)


def _completed(trainer: Trainer, report: TrainingReport, config: TrainConfig, left_out: LeftOut,
               sampled: PassK | None) -> TrainingReport:
    """The trainer's report with what the skeleton knows: the cases left out, ``eval_limit``, how the start and end
    evaluations decoded, and the end policy's pass^k (when asked)."""
    decoded = {label: getattr(report, label).model_copy(update={"decoding": config.decoding})
               for label in (trainer.start_label, trainer.end_label)}
    if sampled is not None:
        decoded[trainer.end_label] = decoded[trainer.end_label].model_copy(update={"pass_hat_k": sampled})
    return report.model_copy(update={**decoded, "left_out": left_out, "eval_limit": config.eval_limit})


def run_skeleton(config: TrainConfig, kit: Kit, trainer: Trainer, log: Log, stop: Stop | None) -> TrainingReport:
    """The skeleton around ``trainer`` in this process (a local target's run): start evaluation, fit, export,
    (merge), reload, end evaluation, report; returns (and writes) the eval.json record."""
    loaded, held_out = kit.world(), kit.cases("eval")
    model, tokenizer = trainer.start_policy()
    expressible = _tokenizable(held_out[: config.eval_limit], loaded, tokenizer, log)
    cases = expressible.kept
    start = evaluate_policy(model, tokenizer, loaded, cases, config, log, trainer.start_label, held_out)
    del model
    fit = trainer.fit(Budget(config.max_model_calls, config.max_minutes, stop), log)
    export = export_model(fit.checkpoint, config.out / "export", kind=fit.kind, config=config.as_json(),
                          base=fit.base, kit_sha256=kit.sha256)
    if config.merge:
        merge_export(export, config.out / "export-merged")
    reloaded, tokenizer, _ = load_export(export)
    end = evaluate_policy(reloaded, tokenizer, loaded, cases, config, log, trainer.end_label, held_out)
    sampled = _pass_k(reloaded, tokenizer, loaded, cases, config, log) if config.pass_k else None
    report = _completed(trainer, trainer.report(start, end, fit), config, expressible.record(), sampled)
    report.write(config.out / "eval.json")
    atomic_write_json(config.out / f"eval_cases_{trainer.end_label}.json", [r.to_json() for r in end.results])
    for label, summary in ((trainer.start_label, start), (trainer.end_label, end)):
        atomic_write_bytes(config.out / f"eval_cases_{label}.jsonl", conversations(summary, label))
    add_model_card(export, model_card(config, verify_export(export), report, loaded.world.identity.id))
    evals = {name: record.pass_rate for name, record in report.evaluations().items()}
    if trainer.end_label == "rl":
        plot_training(config.out / "training.png", fit.history, evals, title="GRPO reward per step",
                      ylabel="mean reward")
    else:
        plot_training(config.out / "training.png", fit.history, evals)
    return report
