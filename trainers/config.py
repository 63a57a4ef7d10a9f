"""The one training configuration: every training default lives here, once.

``blobkit train``'s options, ``blobkit company train``'s training settings, the demo and the
RunPod pod all read their defaults from :class:`TrainConfig` (the CLI generates its options from
the fields below; the pod receives the resolved config as a file). Named :data:`PRESETS` bundle
the settings of a recipe (the tiny model from scratch, LoRA on a pretrained base) instead of
copying defaults elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainers.errors import ConfigError
from trainers.targets.local_torch import LocalTorchSettings
from trainers.targets.registry import TargetName
from trainers.targets.runpod import RunPodTargetSettings

Method = Literal["sft", "grpo", "rft"]
"""``sft``: supervised on the kit's rows; ``grpo``: RL with the verifier as reward; ``rft``: rejection-sampling
fine-tuning, SFT on the verifier-passed episodes sampled from an SFT export (:mod:`trainers.rft`)."""
ToolFormatName = Literal["auto", "blobkit", "hermes", "qwen3", "llama3", "lfm2"]
"""``auto`` and the names of :data:`trainers.formats.FORMATS` (a test keeps the two lists equal)."""


def read_json_object(path: Path, what: str, not_an_object: str) -> dict[str, Any]:
    """The JSON object in ``path``; ConfigError "PATH: cannot read WHAT: …" when it cannot be read or parsed, and
    "PATH: NOT_AN_OBJECT" when it holds something other than an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: {not_an_object}")
    return value


class TrainConfig(BaseModel):
    """Everything a training run needs; written to plan.json and beside every checkpoint and export."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kit: Path | None = None
    """Kit directory or archive (required to train or plan)."""
    data: Path | None = None
    """SFT rows (defaults to the kit's sft.jsonl)."""
    base: str = "Qwen/Qwen3-8B"
    """Catalog id or local model directory."""
    revision: str | None = None
    """Pinned revision (commit, tag or branch) of a hub base."""
    tool_format: ToolFormatName = "auto"
    """How tools, tool calls and results are written for the model: auto (chosen from the base's chat template;
    blobkit's compact ChatML format for a base whose template cannot render tools, such as SmolLM2), blobkit,
    hermes (Qwen2.5), qwen3, llama3 or lfm2 (spec/tool-formats.md)."""
    method: Method = "grpo"
    """Training method: sft, grpo, or rft (rejection sampling: SFT on the verifier-passed episodes sampled from the
    --init-adapter export)."""
    target: TargetName = "local-mlx"
    """Where training runs (trainers/targets/: local-torch, local-mlx or runpod)."""
    out: Path = Path("out/train")
    """Output directory."""
    dry_run: bool = False
    """Plan only: validate, count tokens, write plan.json."""
    full: bool = False
    """Train all weights instead of a LoRA adapter."""
    lora_rank: int = Field(16, ge=1, le=512)
    """LoRA rank (alpha is twice the rank)."""
    merge: bool = False
    """LoRA runs: also export the base with the adapter merged in, as a full model, in OUT/export-merged."""
    epochs: float = Field(8, gt=0)
    """SFT epochs."""
    steps: int = Field(100, ge=1)
    """GRPO steps."""
    seed: int = 42
    """Seed for data order, initialisation and sampling."""
    learning_rate: float = Field(2e-4, gt=0)
    """Peak learning rate."""
    lr_scheduler: Literal["linear", "cosine", "constant"] = "linear"
    """SFT: how the learning rate decays after the warm-up (to 0 for linear and cosine)."""
    warmup_ratio: float = Field(0.03, ge=0, lt=1)
    """SFT: share of optimizer steps spent warming the learning rate up from 0."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    batch_size: int = Field(8, ge=1)
    """Rows per SFT optimizer step; episodes per GRPO step (batch_size // group_size prompts)."""
    max_length: int = Field(1024, ge=64)
    """Longest row in tokens; longer rows are an error, never dropped."""
    packing: bool = False
    """Pack rows (padding-free, no cross-example attention)."""
    shared_prefix: bool = False
    """SFT on local-torch: run the prefix every row of a batch shares (the system prompt and tool list) once per
    batch, its KV cache shared by the rows; the same loss and gradients as the padded batch
    (:mod:`trainers.shared_prefix`). Not with --packing (packed rows share nothing)."""
    decision_weight: float = Field(1.0, ge=1, le=100)
    """SFT and RFT on local-torch: loss weight of the first 16 trained tokens of each assistant turn, where the turn
    decides to call a tool or answer and which tool (:mod:`trainers.turn_weights`); 1 weighs every token alike."""
    gradient_checkpointing: bool = False
    """SFT on local-torch: recompute each layer's activations in backward instead of keeping them (about a third
    more compute, a fraction of the activation memory; plan.json's ``memory`` says what it saves)."""
    max_batch_tokens: int | None = Field(None, ge=64)
    """SFT on local-torch: bound the tokens of one forward pass: rows per pass are the largest divisor of
    batch_size whose longest rows fit, and gradient accumulation keeps batch_size rows per optimizer update."""
    memory_limit_gb: float | None = Field(None, gt=0)
    """Memory the run may use (GB); default: 85 % of this machine's (the GPU's on CUDA). A dry run refuses an SFT
    plan whose estimate (plan.json ``memory``) is over it, naming the settings that would fit."""
    group_by_length: bool = False
    """SFT without packing: batch rows of similar length together (seeded), so little compute goes to padding.
    Faster, but batches of one length are batches of one task shape: from scratch at a high learning rate it
    learned far worse (see benchmarks/README.md)."""
    grounding_repeats: int = Field(0, ge=0, le=16)
    """SFT: add every grounding turn (a tool call whose text argument quotes the user, such as the email address
    a customer gave) this many extra times as its own example: the executed conversation up to that call.
    0 turns it off."""
    answer_quote_repeats: int = Field(0, ge=0, le=16)
    """SFT: add every assistant answer that quotes a figure from a tool observation (such as an order total) this
    many extra times as its own example: the executed conversation up to that answer. 0 turns it off."""
    max_turns: int | None = Field(None, ge=1)
    """Turn cap of an evaluation episode, a GRPO rollout and a replay (assistant turns). Default: derived from the
    kit, the longest case's reference conversation plus 2 (:mod:`trainers.episode_limit`); a cap below what a case
    needs is refused unless ``short_episodes``."""
    short_episodes: bool = False
    """Accept a ``max_turns`` below what some cases need, or a ``max_new_tokens`` below a row's longest assistant
    turn (a smoke run): those cases cannot be passed, and plan.json's ``episode_limit`` and ``turn_tokens`` count
    them."""
    max_new_tokens: int | None = Field(None, ge=8)
    """Token cap of a generated assistant turn (evaluation, GRPO and RFT rollouts, pass^k, replay). Default:
    derived from the kit's rows, their longest assistant turn under the base's chat template plus a quarter
    (:mod:`trainers.turn_tokens`); a cap below that turn is refused unless ``short_episodes``."""
    episode_batch: int = Field(8, ge=1)
    """Episodes decoded together (held-out evaluation and GRPO rollouts): the shared system prompt and tool list
    prefilled once, each episode keeping its KV cache across its turns, their decode steps run as one batch. 1
    decodes one episode at a time. Greedy turns do not depend on it (bit for bit on one CPU thread, where models
    under 50 M parameters decode)."""
    pass_k: int = Field(0, ge=0, le=16)
    """After the end evaluation, attempt every held-out case this many more times, sampled at
    ``pass_k_temperature``, and report pass^k (all attempts pass) beside pass@1 (:mod:`trainers.pass_k`). 0 turns
    it off; 3 is the issue's pass^3."""
    pass_k_temperature: float = Field(0.7, gt=0)
    """Sampling temperature of the pass^k attempts."""
    decoding: Literal["free", "constrained", "grounded"] = "free"
    """How tool calls are decoded in held-out evaluation, GRPO rollouts, pass^k and replay: free, or constrained
    to the declared tools, their argument schemas and, for arguments that name a row, values the conversation holds
    (:mod:`trainers.constrained`; hermes-style formats), or grounded: constrained, and every number a text turn
    writes is one the conversation wrote. Recorded in every result; the verifier is the same."""
    eval_limit: int | None = Field(None, ge=1)
    """Evaluate at most this many held-out cases (default: all)."""
    init_adapter: Path | None = None
    """An export (``OUT/export`` of an SFT run) that GRPO warm-starts from, and RFT samples from and trains on."""
    group_size: int = Field(2, ge=2)
    """GRPO attempts per prompt (a group)."""
    temperature: float = Field(1.0, gt=0)
    """Sampling temperature of GRPO rollouts."""
    resample_rounds: int = Field(0, ge=0, le=8)
    """GRPO: rounds of fresh prompts drawn within a step for the groups whose rewards all tied (every attempt
    passed, or every one failed: zero advantage, no signal), one new prompt per tied group from the training prompts
    not drawn yet in that step; the update covers the groups that varied. 0: tied groups are dropped, not replaced.
    A step's worst case (its model-call budget) grows by a factor of 1 + this."""
    kl_coef: float = Field(0.0, ge=0, le=10)
    """GRPO: weight of a penalty that holds the policy to the one it started from (the --init-adapter's, or the
    base), added to the policy-gradient loss: the k3 estimate of KL(policy || start) per generated token,
    exp(r) - r - 1 with r = log p_start - log p_policy (Schulman 2020; DeepSeekMath's GRPO, arXiv 2402.03300),
    summed over the tokens the policy-gradient loss covers and divided by their count. 0 (the default, as TRL's
    and the Tinker cookbook's): no penalty and no reference forward. local-torch only."""
    reward: Literal["verdict", "checks"] = "verdict"
    """GRPO: what an episode earns. ``verdict``: 1 when the verifier passes it, else 0. ``checks``: a pass still 1,
    a failure 0.5 x the share of the verifier's checks it met (0 after a procedure violation or a verifier error),
    so a group whose attempts all fail still varies where they met different checks (:func:`trainers.grpo.
    episode_reward`)."""
    rft_samples: int = Field(4, ge=1, le=64)
    """RFT: episodes sampled per training case from the --init-adapter policy (k); the verifier-passed ones,
    deduplicated, are the rows RFT trains on."""
    rft_temperature: float = Field(0.7, gt=0)
    """RFT: sampling temperature of those episodes."""
    rft_fill: Literal["none", "reference"] = "none"
    """RFT: what stands for a sampled training case none of whose episodes was kept. ``none``: nothing (the rows
    are the policy's successes alone, so the families it fails shrink in the mix); ``reference``: the case's kit
    row, its executed reference chain, so every sampled case keeps a row (STaR's rationalization: Zelikman et al.,
    arXiv 2203.14465)."""
    max_model_calls: int | None = Field(None, ge=1)
    """Budget: stop training at a step boundary before it could pass this many model calls (generated turns of
    GRPO rollouts and RFT samples; evaluations are not counted)."""
    max_minutes: float | None = Field(None, gt=0)
    """Budget: stop training at a step boundary once this many minutes of training have passed."""
    confirm_spend: bool = False
    """Allow a paid target (runpod) to create resources that cost money."""
    local_torch: LocalTorchSettings = LocalTorchSettings()
    """The local-torch target's settings: processes and their launcher."""
    runpod: RunPodTargetSettings = RunPodTargetSettings()
    """The runpod target's settings: GPU type and count, the pod's hour limit."""

    @property
    def turn_cap(self) -> int:
        """``max_turns`` once resolved against a kit (:func:`trainers.episode_limit.episode_limit`); ConfigError
        before."""
        if self.max_turns is None:
            raise ConfigError("the turn cap is derived from the kit: resolve it first "
                              "(trainers.episode_limit.episode_limit)")
        return self.max_turns

    @property
    def token_cap(self) -> int:
        """``max_new_tokens`` once resolved against the kit's rows (:func:`trainers.turn_tokens.turn_tokens`);
        ConfigError before."""
        if self.max_new_tokens is None:
            raise ConfigError("the token cap of a turn is derived from the kit's rows: resolve it first "
                              "(trainers.turn_tokens.turn_tokens)")
        return self.max_new_tokens

    @classmethod
    def preset(cls, name: str, **values: Any) -> TrainConfig:
        """The config of preset ``name`` (see :data:`PRESETS`), with ``values`` on top."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
        return cls(**{**PRESETS[name], **values})

    def with_preset(self, name: str) -> TrainConfig:
        """This config with the preset's settings applied where this config still has the default."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; presets: {', '.join(sorted(PRESETS))}")
        kept = {field: value for field, value in PRESETS[name].items() if field not in self.model_fields_set}
        return self.model_copy(update=kept)

    def unsupported(self) -> str | None:
        """Why this method/target/option combination cannot run (with what can), or None when it can.

        Asks the target (:func:`trainers.targets.registry.unsupported`, the one place the rules live).
        """
        from trainers.targets.registry import unsupported

        return unsupported(self)

    def as_json(self) -> dict[str, Any]:
        """The config as plain JSON (what plan.json, checkpoints and exports record)."""
        return self.model_dump(mode="json")


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {"full": True, "learning_rate": 2e-3, "batch_size": 4, "epochs": 3, "max_length": 2048,
             "grounding_repeats": 3, "answer_quote_repeats": 2, "decoding": "grounded"},
    "lora": {"epochs": 1, "batch_size": 8, "max_length": 4096},
}
"""Named recipes. ``tiny``: blobkit's tiny model trained from scratch on every weight at a high learning rate,
with the grounding and answer-quote repeats it needs to learn copying, decoded grounded: its tool calls constrained
and its answers' numbers the conversation's (on the demo's 44 held-out retail cases one export passed 0.864
grounded with the token cap derived from the kit; at a 64-token cap, 0.682 grounded, 0.500 constrained and 0.114
free; benchmarks/README.md has the measurements). ``lora``: a LoRA adapter on a pretrained base at the default
learning rate for one epoch, with room for a real chat template's longer rows. Neither sets ``max_new_tokens``:
it is derived from the kit's rows (:mod:`trainers.turn_tokens`)."""
