"""What a company job decides besides its source and base model, composed from the models that own each setting.

:class:`CompanyConfig` copies no field. It holds the kit builder's :class:`~blobkit.builder.BuildConfig`,
one :class:`~trainers.config.TrainConfig` per training stage (``sft``, ``rl``), the tiny model's
:class:`~trainers.tiny_model.TinyModelConfig`, the job's :class:`CompanyBudgets` and whether it may train on
a held-out set too small to mean anything (``allow_small_held_out``). Training defaults
live in ``TrainConfig`` and its presets only: ``tiny`` for ``--base-model tiny`` (the demo's recipe)
and ``lora`` for a real base. The company's own choices are written once, below, as overrides on top
of the preset, each with its reason. At run time a stage's ``TrainConfig`` is ``config.sft`` (or
``config.rl``) with only the run's location filled in (kit, base, output folder…).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from blobkit.builder import BuildConfig
from blobkit.demo import TRAIN_CASES_PER_TASK as DEMO_TRAIN_CASES
from trainers.config import TrainConfig
from trainers.episode_limit import derived_cap
from trainers.tiny_model import TinyModelConfig

TINY = "tiny"
"""The ``--base-model`` that builds blobkit's tiny random-weight model from the kit (offline, CPU)."""

TARGET = "local-torch"
"""Where a company job trains: locally, with torch (SFT and GRPO)."""

COMPANY_BUILD: dict[str, Any] = {"eval_cases_per_task": 6}
"""Six held-out cases per task (the builder's default), so every example world holds out well over the
:data:`~blobkit.company.held_out.MIN_HELD_OUT_ENTITIES` (20) independent entities ``company inspect`` asks for.
Minting gives each task's held-out cases entities no earlier task holds out, so entities grow almost as fast as
cases. Measured with ``company inspect --eval-cases N`` (held-out cases / independent entities at N = 1, 4, 6):
retail_desk 11/11, 44/43, 66/63; it_helpdesk 11/11, 44/44, 66/61; airline_desk 11/11, 44/41, 66/58 (the IT and
airline worlds grown to 640 employees / customers for issue 29; at N = 20 they hold out 210/121 and 209/126). Every
held-out case is evaluated (``eval_limit`` below)."""

TINY_BUILD: dict[str, Any] = {"train_cases_per_task": DEMO_TRAIN_CASES}
"""``--base-model tiny``: as many training cases per task as the demo's kit (a model trained from scratch needs many
distinct cases). A real base keeps the builder's default."""

COMPANY_TRAINING: dict[str, Any] = {"eval_limit": None, "max_turns": None, "target": TARGET}
"""Both stages. Every held-out case is evaluated, so the pass rates are over the entities ``company inspect``
counted (the kit lists its held-out cases task by task: a limit would keep the first few tasks' cases only).
The turn cap is derived from the kit once it is built (:func:`with_turn_caps`: its longest case's turns plus
:data:`~trainers.episode_limit.EPISODE_SLACK`), so no held-out case is cut short. The company trains locally with
torch (SFT and GRPO)."""

COMPANY_SFT: dict[str, Any] = {"method": "sft"}
"""The first stage is supervised fine-tuning on the kit's executed rows."""

COMPANY_RL: dict[str, Any] = {"method": "grpo", "steps": 4}
"""The second stage is GRPO: four steps, what the budget above leaves room for."""

RL_PROMPTS_PER_STEP = 1
"""Training prompts per GRPO step: one, so a step is one group (``rl.batch_size`` = ``rl.group_size``) and the
budget's worst case per step stays small."""

DEFAULT_MODEL_CALLS = 2079
"""The default model-call budget: the worst case of a company job on the largest held-out set a company kit can
hold at the builder's default task cap, 12 tasks x 6 cases = 72, at a 7-turn cap (the airline example's derived
cap, the longest of the examples; a higher ``--max-tasks`` or longer cases need a larger ``--max-model-calls``):
four evaluations (base and SFT in the SFT stage, GRPO's start and RL in the RL stage) of 72 cases at 7 turns
(2,016 calls), four GRPO steps of one prompt x 2 attempts x 7 turns (56) and the replay (7). Fewer held-out
cases or shorter cases leave the rest unspent: GRPO stops at its four steps."""


def preset_name(base_model: str) -> str:
    """The TrainConfig preset of ``base_model``: ``tiny`` for the tiny model (as the demo), ``lora`` otherwise."""
    return "tiny" if base_model == TINY else "lora"


class CompanyBudgets(BaseModel):
    """The job's budgets, summed over every stage and every resume."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_minutes: float = Field(30, gt=0)
    """Budget: active minutes of the whole job (summed over resumes)."""
    max_model_calls: int = Field(DEFAULT_MODEL_CALLS, ge=1)
    """Budget: model calls (generated assistant turns) of the whole job."""


def _build(preset: str, values: Mapping[str, Any]) -> BuildConfig:
    return BuildConfig(**{**COMPANY_BUILD, **(TINY_BUILD if preset == "tiny" else {}), **values})


def _sft(preset: str, values: Mapping[str, Any]) -> TrainConfig:
    return TrainConfig.preset(preset, **{**COMPANY_TRAINING, **COMPANY_SFT, **values})


def _rl(preset: str, values: Mapping[str, Any]) -> TrainConfig:
    merged = {**COMPANY_TRAINING, **COMPANY_RL, **values}
    group = merged.get("group_size", TrainConfig.preset(preset).group_size)
    merged.setdefault("batch_size", RL_PROMPTS_PER_STEP * group)
    return TrainConfig.preset(preset, **merged)


def with_turn_caps(config: CompanyConfig, longest_case_turns: int) -> CompanyConfig:
    """``config`` with each stage's unset turn cap derived from a kit whose longest case takes
    ``longest_case_turns`` assistant turns (:func:`trainers.episode_limit.derived_cap`); a set cap is kept."""
    cap = derived_cap(longest_case_turns)
    update = {name: stage.model_copy(update={"max_turns": cap})
              for name, stage in (("sft", config.sft), ("rl", config.rl)) if stage.max_turns is None}
    return config.model_copy(update=update)


class CompanyConfig(BaseModel):
    """Everything a company job decides besides its source and base model (recorded in the job identity).

    ``CompanyConfig()`` is the recipe for a real base; :meth:`for_base` gives the recipe of any base.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    build: BuildConfig = Field(default_factory=lambda: _build("lora", {}))
    """The kit: minting, the split, training and held-out cases per task."""
    sft: TrainConfig = Field(default_factory=lambda: _sft("lora", {}))
    """The SFT stage's training config (its kit, base and output folder are filled in when it runs)."""
    rl: TrainConfig = Field(default_factory=lambda: _rl("lora", {}))
    """The GRPO stage's training config (warm-started from the SFT export; budgets are filled in when it runs)."""
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    """``--base-model tiny``: the tiny model's shape and seed (unused for a real base)."""
    budgets: CompanyBudgets = Field(default_factory=CompanyBudgets)
    """The job's budgets."""
    allow_small_held_out: bool = False
    """Train even when the kit's held-out cases concern fewer independent entities than ``company inspect``'s
    minimum (the only fault it waives): the job's check, record and results then say the held-out set is too small
    to mean anything."""

    @model_validator(mode="after")
    def _whole_groups(self) -> CompanyConfig:
        if self.rl.batch_size % self.rl.group_size:
            raise ValueError(f"rl.batch_size {self.rl.batch_size} (episodes per GRPO step) must be a multiple of "
                             f"rl.group_size {self.rl.group_size} (attempts per prompt)")
        return self

    @classmethod
    def for_base(cls, base_model: str, *, build: Mapping[str, Any] | None = None,
                 sft: Mapping[str, Any] | None = None, rl: Mapping[str, Any] | None = None,
                 tiny: Mapping[str, Any] | None = None, budgets: Mapping[str, Any] | None = None,
                 allow_small_held_out: bool = False) -> CompanyConfig:
        """The company recipe for ``base_model`` (its preset plus the company's choices), with ``values`` on top.

        Each keyword holds field values of that part; in ``rl``, a ``group_size`` without a ``batch_size``
        keeps one prompt per GRPO step.
        """
        preset = preset_name(base_model)
        return cls(build=_build(preset, build or {}), sft=_sft(preset, sft or {}), rl=_rl(preset, rl or {}),
                   tiny=TinyModelConfig(**(tiny or {})), budgets=CompanyBudgets(**(budgets or {})),
                   allow_small_held_out=allow_small_held_out)
