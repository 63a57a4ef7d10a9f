"""blobkit's worlds through the Tinker SDK: a supervised loop and an RL loop written against the real ``tinker`` client.

They are what a user would write against any Tinker-compatible service (``blobkit serve`` at
``/tinker``): the script keeps the loop, the service runs the model.

- :func:`supervised_loop`: a kit's SFT rows rendered in the base's tool format (the chat template of
  :func:`trainers.formats.apply_tool_format`, with its ``{% generation %}`` markers), weights 1 on
  assistant tokens only, ``cross_entropy``, one AdamW step per batch: the same rows, masks and loss
  (up to the per-token mean) as ``blobkit train --method sft``.
- :func:`rl_loop`: the world is the environment. Each step samples a group of episodes per case through
  a sampling client on the current weights, runs each through blobkit's episode harness
  (:func:`trainers.evaluation.run_episodes`: tool calls executed on an isolated copy of the seed, the
  customer's scripted turns) and scores it with the case's VCode (reward 1 on a pass), takes
  group-relative advantages (reward minus the group mean, :func:`trainers.grpo.advantages`) and trains
  every generated token with the ``importance_sampling`` loss against the sampler's logprobs.
- :func:`evaluate_sampler`: blobkit's usual held-out evaluation (:func:`trainers.evaluation.evaluate_cases`)
  with greedy turns sampled through the SDK.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from world_format.kit import KitCase

from .chat_format import RenderedRow, render_row
from .errors import ConfigError
from .evaluation import EpisodeResult, EvalSummary, evaluate_cases, run_episodes
from .formats import ToolFormat, apply_tool_format
from .generation import turn_text
from .grpo import advantages
from .turns import TurnRequest


def tensor(values: Sequence[float] | Sequence[int], dtype: str) -> Any:
    """A 1-D ``tinker.TensorData`` (``int64`` or ``float32``)."""
    import tinker

    return tinker.TensorData(data=list(values), dtype=dtype, shape=[len(values)])  # type: ignore[arg-type]


def row_datum(rendered: RenderedRow) -> Any:
    """A ``tinker.Datum`` for cross-entropy: input ``ids[:-1]``, targets ``ids[1:]``, weights the shifted mask."""
    import tinker

    return tinker.Datum(model_input=tinker.ModelInput.from_ints(rendered.ids[:-1]),
                        loss_fn_inputs={"target_tokens": tensor(rendered.ids[1:], "int64"),
                                        "weights": tensor([float(m) for m in rendered.assistant[1:]], "float32")})


@dataclass
class SupervisedResult:
    """What :func:`supervised_loop` did."""

    training_client: Any
    losses: list[float] = field(default_factory=list)
    """Per step: the summed loss over the batch's assistant tokens divided by their number (the mean NLL)."""
    tokens: int = 0
    """Input tokens sent through forward/backward."""


def supervised_loop(service_client: Any, base_model: str, rows: Sequence[dict[str, Any]], *, steps: int,
                    batch_size: int = 4, learning_rate: float = 1e-3, rank: int = 8, seed: int = 0,
                    tool_format: str = "auto", training_client: Any = None) -> SupervisedResult:
    """``steps`` cross-entropy steps on ``rows`` (seeded order, cycling) with a LoRA of ``rank`` on ``base_model``.

    ``training_client`` continues an existing client instead of creating one (``train_unembed=False``: the
    layers ``blobkit train`` adapts).
    """
    import tinker

    if not rows:
        raise ConfigError("supervised_loop needs at least one row")
    client = training_client or service_client.create_lora_training_client(
        base_model=base_model, rank=rank, seed=seed, train_unembed=False).result()
    tokenizer = client.get_tokenizer()
    apply_tool_format(tokenizer, tool_format, where=base_model)
    rendered = [render_row(tokenizer, row) for row in rows]
    order = list(range(len(rendered)))
    random.Random(seed).shuffle(order)
    result = SupervisedResult(client)
    for step in range(steps):
        batch = [rendered[order[(step * batch_size + i) % len(order)]] for i in range(batch_size)]
        output = client.forward_backward([row_datum(r) for r in batch], "cross_entropy").result()
        client.optim_step(tinker.AdamParams(learning_rate=learning_rate)).result()
        weighted = sum(sum(r.assistant[1:]) for r in batch)
        result.losses.append(output.metrics["loss:sum"] / max(weighted, 1))
        result.tokens += sum(len(r.ids) - 1 for r in batch)
    return result


@dataclass(frozen=True)
class SampledTurn:
    """One assistant turn sampled through the SDK: prompt ids, generated ids and their sampler logprobs."""

    prompt: list[int]
    tokens: list[int]
    logprobs: list[float]


class SdkPolicy:
    """A :class:`trainers.turns.TurnPolicy` whose turns are sampled by a Tinker ``SamplingClient``.

    Every turn of a round is sent at once (the SDK's futures), each seeded from ``seed``, the episode and
    its turn number; the turns are kept per episode (``turns``) for the RL loss.
    """

    def __init__(self, sampling_client: Any, tokenizer: Any, fmt: ToolFormat, *, max_tokens: int,
                 temperature: float, seed: int = 0) -> None:
        self.client, self.tokenizer, self.tool_format = sampling_client, tokenizer, fmt
        self.max_tokens, self.temperature, self.seed = max_tokens, temperature, seed
        self.slots = 64
        self.turns: dict[int, list[SampledTurn]] = {}

    def begin(self) -> None:
        """Forget the previous run's turns."""
        self.turns = {}

    def next_turns(self, requests: Sequence[TurnRequest]) -> list[str]:
        """Sample every request's turn (one sequence each), in parallel."""
        import tinker

        from .chat_format import render_prompt

        futures = []
        for request in requests:
            prompt = list(self.tokenizer(render_prompt(self.tokenizer, request.messages, request.tools),
                                         add_special_tokens=False)["input_ids"])
            turn = len(self.turns.get(request.key, []))
            params = tinker.SamplingParams(max_tokens=self.max_tokens, temperature=self.temperature,
                                           seed=self.seed * 1_000_003 + request.key * 101 + turn)
            futures.append((request.key, prompt,
                            self.client.sample(tinker.ModelInput.from_ints(prompt), num_samples=1,
                                               sampling_params=params)))
        texts = []
        for key, prompt, future in futures:
            sequence = future.result().sequences[0]
            tokens, logprobs = list(sequence.tokens), list(sequence.logprobs or [])
            self.turns.setdefault(key, []).append(SampledTurn(prompt, tokens, logprobs))
            texts.append(turn_text(self.tokenizer, tokens, self.tool_format))
        return texts

    def end(self, key: int) -> None:
        """Nothing to free per episode."""

    def done(self) -> None:
        """Nothing to free per run."""


def _tool_format(tokenizer: Any, requested: str, where: str) -> ToolFormat:
    return apply_tool_format(tokenizer, requested, where=where).format


def evaluate_sampler(sampling_client: Any, tokenizer: Any, runtime: Any, cases: Sequence[KitCase], *,
                     max_turns: int = 5, max_tokens: int = 128, tool_format: str = "auto") -> EvalSummary:
    """Greedy episodes of ``cases`` (held-out) with turns from ``sampling_client``, judged by VCode."""
    fmt = _tool_format(tokenizer, tool_format, "the sampler's base")
    policy = SdkPolicy(sampling_client, tokenizer, fmt, max_tokens=max_tokens, temperature=0.0)
    return evaluate_cases(policy, runtime, cases, max_turns)


@dataclass(frozen=True)
class RLStep:
    """One RL step: its episodes' rewards and whether (and with what loss) it updated."""

    step: int
    rewards: list[float]
    updated: bool
    loss: float
    """The importance-sampling loss summed over the step's tokens (0 when nothing varied)."""
    episodes: list[EpisodeResult]


def rl_datums(turns: Sequence[SampledTurn], advantage: float) -> list[Any]:
    """``importance_sampling`` datums of one rollout's turns: every generated token carries ``advantage`` and its
    sampler logprob; prompt positions carry 0."""
    import tinker

    datums = []
    for turn in turns:
        if not turn.tokens or len(turn.logprobs) != len(turn.tokens):
            continue
        full = turn.prompt + turn.tokens
        prompt_positions = len(turn.prompt) - 1
        datums.append(tinker.Datum(
            model_input=tinker.ModelInput.from_ints(full[:-1]),
            loss_fn_inputs={"target_tokens": tensor(full[1:], "int64"),
                            "logprobs": tensor([0.0] * prompt_positions + [float(x) for x in turn.logprobs], "float32"),
                            "advantages": tensor([0.0] * prompt_positions + [float(advantage)] * len(turn.tokens),
                                                 "float32")}))
    return datums


def rl_loop(training_client: Any, runtime: Any, cases: Sequence[KitCase], *, steps: int, group_size: int = 2,
            cases_per_step: int = 2, learning_rate: float = 1e-4, temperature: float = 1.0, max_turns: int = 5,
            max_tokens: int = 64, seed: int = 0, tool_format: str = "auto") -> list[RLStep]:
    """``steps`` RL steps on ``cases`` (each needs a prompt: see :func:`trainers.grpo.rl_cases`)."""
    import tinker

    tokenizer = training_client.get_tokenizer()
    fmt = _tool_format(tokenizer, tool_format, "the training base")
    order = random.Random(seed)
    history = []
    for step in range(steps):
        sampler = training_client.save_weights_and_get_sampling_client().result()
        chosen = order.sample(list(cases), min(cases_per_step, len(cases)))
        group = [case for case in chosen for _ in range(group_size)]
        policy = SdkPolicy(sampler, tokenizer, fmt, max_tokens=max_tokens, temperature=temperature,
                           seed=seed * 7919 + step)
        episodes = run_episodes(policy, runtime, group, max_turns)
        rewards = [1.0 if episode.passed else 0.0 for episode in episodes]
        weights = advantages(rewards, group_size)
        datums = [d for key, weight in enumerate(weights) if weight for d in rl_datums(policy.turns.get(key, []),
                                                                                         weight)]
        loss, updated = 0.0, bool(datums)
        if datums:
            output = training_client.forward_backward(datums, "importance_sampling").result()
            training_client.optim_step(tinker.AdamParams(learning_rate=learning_rate)).result()
            loss = output.metrics["loss:sum"]
        history.append(RLStep(step, rewards, updated, loss, episodes))
    return history
