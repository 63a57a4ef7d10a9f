"""Held-out cases as a job's evidence holds them: the per-case files (``eval_cases_*.json``), typed and read.

Each evaluated model's file is a list of :class:`CaseResult` (what :meth:`trainers.evaluation.EpisodeResult.to_json`
writes): the verifier's verdict, the tool calls with their arguments and observations, and the whole
conversation. :data:`MODEL_FILES` names the file of each model as the worker uploads it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from blobkit.errors import NotFoundError, StoreCorruptError

from .. import jobs
from ..records import Record, TrainingJob
from ..store import ServiceStore

MODEL_FILES: dict[str, str] = {"base": "sft-eval_cases_base.json", "sft": "sft-eval_cases_sft.json",
                               "rl": "eval_cases_rl.json"}
"""The per-case file of each evaluated model (the base and SFT measured by the SFT stage, RL by the RL stage)."""
MODEL_NAMES = {"base": "Base", "sft": "SFT", "rl": "RL"}
MAX_CASES_BYTES = 64 << 20


class ToolFunction(Record):
    """The function a tool call names."""

    name: str
    """The tool."""
    arguments: Any
    """Its arguments (a JSON object as the model wrote it)."""


class ToolCall(Record):
    """One tool call of an agent turn."""

    id: str
    """``call_<n>``."""
    type: Literal["function"] = "function"
    """Always ``function``."""
    function: ToolFunction
    """What it calls."""


class ChatMessage(Record):
    """One message of a conversation (the kit's row format)."""

    role: Literal["system", "user", "assistant", "tool"]
    """system: the policies; user: the customer; assistant: the agent; tool: an observation."""
    content: str = ""
    """The text (a tool observation as canonical JSON)."""
    tool_calls: list[ToolCall] | None = None
    """The agent's tool calls in this turn."""
    tool_call_id: str | None = None
    """The call a tool message answers."""
    name: str | None = None
    """The tool a tool message comes from."""


class TraceEvent(Record):
    """One call the world executed."""

    tool: str
    """The tool."""
    arguments: Any
    """Its arguments."""
    observation: Any
    """What the world answered."""
    error: bool
    """Whether the call failed."""


class CaseVerdict(Record):
    """The verifier's verdict on the episode."""

    outcome: Literal["pass", "fail", "error"]
    """pass, fail or error (an error is never a pass)."""
    reason: str = ""
    """Why it did not pass (the first failing check)."""
    checks: list[str] = []
    """The checks that ran."""


class CaseResult(Record):
    """One held-out case as one model ran it."""

    case_id: str
    """The case."""
    template: str
    """Its task template."""
    verdict: CaseVerdict
    """The verifier's verdict."""
    passed: bool
    """Whether it passed."""
    answer: str | None
    """The final answer (None: the turn cap ended the episode)."""
    turns: int
    """Model calls made."""
    parse_failures: int
    """Malformed tool-call blocks."""
    trace: list[TraceEvent]
    """The calls the world executed."""
    messages: list[ChatMessage] = []
    """The whole conversation (empty in files written before conversations were kept)."""


class CaseRow(Record):
    """One held-out case across the models that ran it."""

    case_id: str
    """The case."""
    template: str
    """Its task template."""
    by_model: dict[str, CaseResult]
    """Model (base, sft, rl) -> its run of the case."""


CASES = TypeAdapter(list[CaseResult])


def model_cases(store: ServiceStore, workspace: str, job: TrainingJob, model: str) -> list[CaseResult]:
    """The per-case results of one model of a job; NotFoundError when the job has no such file (yet)."""
    if model not in MODEL_FILES:
        raise NotFoundError(f"no evaluated model {model!r}: choose one of {', '.join(MODEL_FILES)}")
    name = MODEL_FILES[model]
    path, _ = jobs.artifact_blob(store, workspace, job.env_id, job.job_id, name)
    with open(path, "rb") as handle:
        data = handle.read(MAX_CASES_BYTES + 1)
    try:
        if len(data) > MAX_CASES_BYTES:
            raise ValueError(f"more than {MAX_CASES_BYTES} bytes")
        return CASES.validate_python(json.loads(data))
    except (ValueError, ValidationError) as exc:
        raise StoreCorruptError(f"{name} of job {job.job_id} is not a per-case result file ({exc}); download it "
                                "to inspect it") from None


def case_rows(store: ServiceStore, workspace: str, job: TrainingJob) -> list[CaseRow]:
    """Every held-out case any model ran, in the order the RL evaluation (else the first file) lists them."""
    present = {artifact.name for artifact in job.artifacts}
    results = {model: model_cases(store, workspace, job, model)
               for model, name in MODEL_FILES.items() if name in present}
    order: list[tuple[str, str]] = []
    for model in ("rl", "sft", "base"):
        for case in results.get(model, []):
            if case.case_id not in {case_id for case_id, _ in order}:
                order.append((case.case_id, case.template))
    return [CaseRow(case_id=case_id, template=template,
                    by_model={model: case for model, cases in results.items() for case in cases
                              if case.case_id == case_id})
            for case_id, template in order]


def models_in(rows: list[CaseRow]) -> list[str]:
    """The models (of base, sft, rl, in that order) that ran any of ``rows``."""
    return [model for model in MODEL_FILES if any(model in row.by_model for row in rows)]


def one_case(store: ServiceStore, workspace: str, job: TrainingJob, model: str, case_id: str) -> CaseResult:
    """One model's run of one case; NotFoundError when it did not run it."""
    found = next((c for c in model_cases(store, workspace, job, model) if c.case_id == case_id), None)
    if found is None:
        raise NotFoundError(f"{MODEL_NAMES.get(model, model)} did not run case {case_id!r} in job {job.job_id}")
    return found


def pretty(value: Any) -> str:
    """A JSON value (or JSON text) indented for reading."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
