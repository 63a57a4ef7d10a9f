"""eval.json as typed records: what :func:`trainers.run.run_training` returns and every run writes.

:class:`EvalRecord` is one model's held-out evaluation (:meth:`trainers.evaluation.EvalSummary.record`);
:class:`SFTReport`, :class:`GRPOReport` and :class:`RFTReport` are the reports a run writes (:data:`TrainingReport`,
told apart by their fields; :func:`read_report` reads any). The company pipeline, the CLI, the model card and the
service read these, never the dicts. Each serialises to exactly the JSON written before these records existed: a
field named in ``_omitted`` is absent when it does not apply (:class:`~trainers.record.Record`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from world_format.canonical import atomic_write_json

from .failure_kinds import FailureKinds
from .paired import PairedComparison
from .pass_k import PassK
from .record import Record


class RateRecord(Record):
    """A pass rate with its sample: cases, passes, independent entities and the 95 % Wilson interval over cases."""

    pass_rate: float
    """Passed cases / cases (0 for no case), rounded to 4 places."""
    cases: int
    """Held-out cases evaluated."""
    passed: int
    """Cases the verifier passed."""
    entities: int | None = None
    """Independent entities (a customer with their orders) the cases concern: the real sample size."""
    interval_95: tuple[float, float] | None = None
    """95 % Wilson score interval of the pass rate over cases."""

    def text(self) -> str:
        """``0.625 (30/48 cases, 12 entities; 95 % CI 0.48-0.75)``: the rate as the CLI prints it."""
        from .intervals import rate_text

        return rate_text(self.to_json())


class Refusal(Record):
    """How refusals went wrong."""

    false_acceptance: int
    """Refusal cases that failed (the agent did what the policy refuses)."""
    false_rejection: int
    """Write cases that failed without a successful write (the agent declined or never wrote)."""


class EvalRecord(RateRecord):
    """One model's greedy evaluation on held-out cases, as eval.json records it under ``base``, ``sft`` or ``rl``."""

    _omitted = frozenset({"decoding", "pass_hat_k", "failures"})
    interval_method: str
    """How the interval was computed."""
    side: str
    """The side(s) of the kit the scored cases are on: ``eval``, ``train`` or ``train+eval``."""
    cases_in_side: int
    """That side's cases in the kit."""
    coverage: float
    """Distinct cases scored / cases_in_side."""
    partial: bool
    """Whether the score leaves some of the side's cases out."""
    duplicates: int
    """Repeated case ids counted once."""
    per_template: dict[str, RateRecord]
    """The rate per task template."""
    tool_call_parse_failures: int
    """Model turns whose tool call could not be parsed."""
    refusal: Refusal
    """Refusal errors."""
    verifier_errors: int
    """Cases whose verifier could not judge (counted as failed)."""
    model_calls: int
    """Generated assistant turns over all episodes."""
    decoding: str | None = None
    """How its tool calls were decoded: ``free`` or ``constrained`` (set by the run skeleton)."""
    pass_hat_k: PassK | None = None
    """k sampled attempts per case beside this greedy pass@1, when the run asked for them."""
    failures: FailureKinds | None = None
    """The failed cases by kind (:mod:`trainers.failure_kinds`); absent in reports written before it."""


class Delta(Record):
    """A difference of two pass rates on the same held-out cases."""

    pass_rate: float
    """The difference (later minus earlier)."""
    cases: int
    """Cases both were evaluated on."""
    paired: PairedComparison | None = None
    """The case-by-case comparison: discordant cases, the 95 % paired bootstrap interval, McNemar's exact p."""


class LeftOut(Record):
    """Held-out cases left out of the evaluation because the base's tokenizer cannot write their required text."""

    untokenizable: int
    """How many."""
    cases: dict[str, str]
    """Each case id and the text that does not survive encode→decode."""
    why: str
    """Why they are left out."""


class RunPodRun(Record):
    """What a run on a RunPod pod cost and which pod it was (the runpod target adds it to the pod's report)."""

    job_id: str
    """blobkit's id of the pod job."""
    pod_id: str
    """RunPod's pod id."""
    pod_name: str
    """The pod's name."""
    gpu_type: str
    """The GPU."""
    gpu_count: int
    """GPUs in the pod."""
    hourly_price_usd: float | None
    """Price of one pod-hour (None: unknown)."""
    seconds: float
    """Seconds from creating the pod to its results."""
    estimated_cost_usd: float | None
    """hourly_price_usd x seconds."""
    bundle_sha256: str
    """The bundle shipped."""
    results_sha256: str
    """The results archive collected (checked against the pod's done.json)."""


class RunReport(Record):
    """What every report carries beside its evaluations; the run skeleton fills ``left_out`` and ``eval_limit``."""

    _omitted = frozenset({"left_out"})
    optimizer_updates: int
    """Optimizer updates applied."""
    stopped_by: str | None
    """The budget or cancel that ended training early (None: it ran to the end)."""
    model_calls: int
    """Model calls (generated assistant turns) of the run."""
    kit_sha256: str
    """The kit trained and evaluated on."""
    left_out: LeftOut | None = None
    """Held-out cases the tokenizer cannot write (always set in a written eval.json)."""
    eval_limit: int | None = None
    """``--eval-limit`` (None: every held-out case)."""

    def evaluations(self) -> dict[str, EvalRecord]:
        """``base``, ``sft``, ``rl`` and ``rft`` (those present), in that order."""
        found = {name: getattr(self, name, None) for name in ("base", "sft", "rl", "rft")}
        return {name: record for name, record in found.items() if record is not None}

    def write(self, path: Path) -> None:
        """Write canonical eval.json (atomically)."""
        atomic_write_json(path, self.to_json())


class SFTReport(RunReport):
    """eval.json of an SFT run: the base and the reloaded SFT export on the same held-out cases."""

    base: EvalRecord
    """The base before training."""
    sft: EvalRecord
    """The exported SFT model, reloaded."""
    train_seconds: float
    """Seconds the fit took."""
    loss_history: list[tuple[int, float]]
    """(optimizer step, training loss) as logged."""
    sft_minus_base: float
    """SFT's pass rate minus the base's."""
    sft_vs_base: PairedComparison
    """The paired comparison of base and SFT."""


class GRPOReport(RunReport):
    """eval.json of a GRPO run: its start policy (the SFT export, or the base) and the RL export."""

    _omitted = RunReport._omitted | {"base", "sft", "rl_minus_sft", "rl_minus_base", "runpod"}
    base: EvalRecord | None = None
    """The base: the start policy when GRPO starts from it, else carried from the SFT run's eval.json."""
    sft: EvalRecord | None = None
    """The SFT start policy (when GRPO starts from an SFT export)."""
    rl: EvalRecord
    """The exported RL model, reloaded."""
    rl_minus_sft: Delta | None = None
    """RL's gain over its SFT start on the same cases."""
    rl_minus_base: Delta | None = None
    """RL's gain over its base start (GRPO without an SFT export)."""
    steps_completed: int
    """GRPO steps that ran."""
    steps_planned: int
    """``--steps``."""
    eval_model_calls: int
    """Model calls of the two evaluations."""
    active_seconds: float
    """Seconds the fit was active."""
    zero_variance_group_fraction: float | None
    """Share of groups whose rewards were all equal (no learning signal); None before any step."""
    reward_history: list[tuple[int, float]]
    """(step, mean reward)."""
    group_size: int
    """Attempts per prompt."""
    shaping: str | None
    """Reward shaping (None: the verifier's verdict alone)."""
    runpod: RunPodRun | None = None
    """The pod it ran on (the runpod target only)."""


class RFTSelection(Record):
    """Which sampled RFT episodes became training rows (:mod:`trainers.rft_select`)."""

    episodes: int
    """Episodes sampled."""
    passed: int
    """Episodes the verifier passed (the case's VCode and the world's procedures, as in evaluation)."""
    verifier_errors: int
    """Episodes the verifier could not judge (never kept)."""
    unusable: int
    """Passed episodes that are no training row (an unparsable turn, no final answer, an invalid call): not kept."""
    duplicates: int
    """Passed, usable episodes whose tools and messages equal an episode already kept (canonical JSON)."""
    kept: int
    """Distinct episodes kept: the rows RFT trains on (passed - unusable - duplicates)."""
    cases_kept: int
    """Training cases with at least one kept row."""
    reference_rows: int = 0
    """Sampled training cases with no kept episode whose kit row was trained on instead (``--rft-fill reference``;
    0 with ``none``)."""


class RFTSampling(RFTSelection):
    """How RFT sampled its episodes from the SFT policy, and what it kept."""

    samples_per_case: int
    """``--rft-samples``: episodes sampled per training case (k)."""
    temperature: float
    """``--rft-temperature``."""
    cases: int
    """Training cases sampled (fewer than ``cases_planned`` when a budget stopped the sampling)."""
    cases_planned: int
    """Training cases RFT would sample: the kit's training cases with an SFT row (renamed replays left out)."""
    model_calls: int
    """Generated assistant turns of the sampled episodes."""
    seconds: float
    """Seconds the sampling took."""


class RFTReport(RunReport):
    """eval.json of an RFT run: the SFT start policy and the RFT export on the same held-out cases."""

    _omitted = RunReport._omitted | {"base"}
    base: EvalRecord | None = None
    """The base, carried from the SFT run's eval.json next to --init-adapter (when there is one)."""
    sft: EvalRecord
    """The SFT start policy (the --init-adapter export)."""
    rft: EvalRecord
    """The exported RFT model, reloaded."""
    rft_minus_sft: Delta
    """RFT's gain over its SFT start on the same held-out cases, with the paired comparison."""
    sampling: RFTSampling
    """Episodes sampled, passed, deduplicated and kept."""
    train_seconds: float
    """Seconds of SFT on the kept rows."""
    loss_history: list[tuple[int, float]]
    """(optimizer step, training loss) as logged."""
    eval_model_calls: int
    """Model calls of the two evaluations (``model_calls`` counts the sampling's)."""


TrainingReport = SFTReport | GRPOReport | RFTReport
"""An eval.json: the SFT, GRPO or RFT report (strict models, so the fields tell which)."""

REPORT: TypeAdapter[SFTReport | GRPOReport | RFTReport] = TypeAdapter(TrainingReport)


def report_from_json(value: Any) -> TrainingReport:
    """An eval.json's parsed JSON (or a stage record's copy of it) as its report; ValidationError when it is
    neither."""
    return REPORT.validate_python(value)


def read_report(path: Path) -> TrainingReport:
    """eval.json as its report (ValidationError when it is no SFT, GRPO or RFT report)."""
    return REPORT.validate_json(Path(path).read_bytes())
