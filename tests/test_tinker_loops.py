"""blobkit's worlds through the Tinker SDK: the loops of trainers.tinker_loops against blobkit serve (tiny model), the
SDK step against blobkit's own SFT step, and a Tinker checkpoint exported for blobkit replay and eval."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

from tinker import types  # noqa: E402
from tinker_support import TinkerServer, set_policy, tinker_server  # noqa: E402

from blobkit.service.tinker import tables  # noqa: E402
from trainers.grpo import rl_cases  # noqa: E402
from trainers.tinker_loops import (  # noqa: E402
    evaluate_sampler,
    render_row,
    rl_datums,
    rl_loop,
    row_datum,
    supervised_loop,
)

BLOBKIT = [sys.executable, "-m", "blobkit.cli"]


@pytest.fixture(scope="module")
def tiny(tinker_tiny: Path) -> Path:
    return tinker_tiny


@pytest.fixture(scope="module")
def server(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerServer]:
    with tinker_server(tmp_path_factory.mktemp("loops-store"), {"tiny": tiny}) as running:
        set_policy(running.store, "acme", ["tiny"], rank=16)
        yield running


@pytest.fixture(scope="module")
def client(server: TinkerServer) -> Iterator[Any]:
    service = server.client(server.store.create_key("acme"))
    yield service
    service.close("success").result()


def _engine(server: TinkerServer, training: Any) -> Any:
    model_id = training.get_info().model_id
    live = server.host.sessions[model_id.split(":train:")[0]]
    return live.runs[model_id].engine


@pytest.mark.slow
def test_ten_supervised_steps_on_kit_rows_lower_the_loss(client: Any, retail_kit: Any) -> None:
    rows = retail_kit.rows()[:16]
    result = supervised_loop(client, "tiny", rows, steps=10, batch_size=4, learning_rate=1e-2, rank=8)
    print("losses of the 10 SDK steps:", [round(x, 4) for x in result.losses])
    assert len(result.losses) == 10 and result.tokens > 0
    assert sum(result.losses[-3:]) / 3 < sum(result.losses[:3]) / 3 * 0.97, result.losses
    sampler = result.training_client.save_weights_and_get_sampling_client().result()
    held_out = retail_kit.cases("eval")[:2]
    runtime = retail_kit.world().runtime()
    try:
        summary = evaluate_sampler(sampler, result.training_client.get_tokenizer(), runtime, held_out, max_turns=1,
                                   max_tokens=24)
    finally:
        runtime.close()
    assert [r.turns for r in summary.results] == [1, 1]  # each first turn was sampled, parsed and judged
    assert all(r.verdict.outcome in ("pass", "fail") for r in summary.results)


def test_the_sdk_step_equals_blobkits_own_sft_step(server: TinkerServer, client: Any, retail_kit: Any, tiny: Path,
                                                   tmp_path: Path) -> None:
    """Same weights, same row: the loss and every adapter gradient of one cross-entropy step through the SDK equal
    those of ``trainers.sft_torch.train_sft`` (TRL's SFTTrainer with blobkit's assistant-token loss) to 1e-5."""
    import torch
    from peft import set_peft_model_state_dict
    from transformers import TrainerCallback

    from trainers.config import TrainConfig
    from trainers.formats import apply_tool_format
    from trainers.sft_torch import train_sft

    row = next(r for r in retail_kit.rows() if len(r["messages"]) >= 5)
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=0, train_unembed=False).result()
    tokenizer = training.get_tokenizer()
    apply_tool_format(tokenizer, "auto")
    rendered = render_row(tokenizer, row)
    training.forward_backward([row_datum(rendered)], "cross_entropy").result()
    training.optim_step(types.AdamParams(learning_rate=1e-2)).result()  # a step first, so no adapter half is zero
    engine = _engine(server, training)
    state = engine.adapter_state()
    output = training.forward_backward([row_datum(rendered)], "cross_entropy").result()
    count = sum(rendered.assistant[1:])
    sdk_loss, sdk_grads = output.metrics["loss:sum"] / count, {k: g / count for k, g in engine.gradients().items()}

    grads: dict[str, Any] = {}

    class SameStart(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state_: Any, control: Any, model: Any = None, **kw: Any) -> None:
            set_peft_model_state_dict(model, state)
            for name, parameter in model.named_parameters():
                if parameter.requires_grad:
                    parameter.register_post_accumulate_grad_hook(
                        lambda p, name=name: grads.__setitem__(name, p.grad.detach().clone()))

    config = TrainConfig(kit=None, base=str(tiny), method="sft", target="local-torch", lora_rank=4, batch_size=1,
                         max_length=4096, learning_rate=1e-2)
    result = train_sft(tiny, [row], tmp_path / "sft", config, max_steps=1, progress=False, log_every=1,
                       callbacks=[SameStart()])
    blobkit_loss = result.loss_history[0][1]
    print(f"loss: SDK {sdk_loss:.8f}, blobkit SFT {blobkit_loss:.8f}; assistant tokens {count}")
    assert abs(sdk_loss - blobkit_loss) < 1e-5
    assert set(grads) == set(sdk_grads) and len(grads) > 0
    worst = max(float((sdk_grads[name] - grads[name]).abs().max()) for name in grads)
    scale = max(float(g.abs().max()) for g in grads.values())
    print(f"gradients: {len(grads)} tensors, largest |g| {scale:.3e}, largest difference {worst:.3e}")
    assert worst < 1e-5 and scale > 1e-3
    assert any(float(g.abs().sum()) > 0 for name, g in grads.items() if "lora_A" in name)
    assert torch.is_tensor(next(iter(grads.values())))


def test_rl_loop_runs_groups_through_the_episode_harness_and_vcode(client: Any, retail_kit: Any) -> None:
    training = client.create_lora_training_client(base_model="tiny", rank=4, seed=0).result()
    cases = rl_cases(retail_kit, retail_kit.rows())
    runtime = retail_kit.world().runtime()
    try:
        history = rl_loop(training, runtime, cases, steps=2, group_size=2, cases_per_step=2, max_turns=2,
                          max_tokens=12, temperature=1.0)
    finally:
        runtime.close()
    assert [len(step.rewards) for step in history] == [4, 4]
    for step in history:
        assert all(episode.verdict.outcome in ("pass", "fail") for episode in step.episodes)
        assert step.updated == (len(set(step.rewards)) > 1)  # an update only where a group's rewards differ
        assert all(1 <= episode.turns <= 2 for episode in step.episodes)


def test_rl_datums_train_only_the_generated_tokens() -> None:
    from trainers.tinker_loops import SampledTurn

    [datum] = rl_datums([SampledTurn([5, 6, 7], [8, 9], [-1.0, -2.0])], 0.5)
    assert datum.model_input.to_ints() == [5, 6, 7, 8]
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [6, 7, 8, 9]
    assert datum.loss_fn_inputs["advantages"].tolist() == [0.0, 0.0, 0.5, 0.5]
    assert datum.loss_fn_inputs["logprobs"].tolist() == [0.0, 0.0, -1.0, -2.0]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BLOBKIT, *args], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
def test_a_sampler_checkpoint_exports_for_replay_and_eval_and_the_cli_lists_it(server: TinkerServer, client: Any,
                                                                              retail_kit: Any, tmp_path: Path) -> None:
    rows = retail_kit.rows()[:4]
    client = server.client(server.store.create_key("acme"))  # its own session: one train job
    result = supervised_loop(client, "tiny", rows, steps=2, batch_size=2, learning_rate=1e-2, rank=4)
    path = result.training_client.save_weights_for_sampler("for-export").result().path
    store = str(server.store.root)
    listed = json.loads(_cli("tinker", "checkpoints", "list", "--store", store, "--workspace", "acme",
                             "--json").stdout)
    assert path in {c["tinker_path"] for c in listed}
    exported = _cli("tinker", "checkpoints", "export", path, "--out", str(tmp_path / "export"), "--store", store,
                    "--workspace", "acme")
    assert exported.returncode == 0, exported.stderr
    replay = _cli("replay", "--model", str(tmp_path / "export"), "--kit", str(retail_kit.root), "--json")
    assert replay.returncode in (0, 1), replay.stderr
    assert json.loads(replay.stdout)["model_kind"] == "lora"
    scored = _cli("eval", "--kit", str(retail_kit.root), "--model", str(tmp_path / "export"), "--limit", "2",
                  "--min-pass-rate", "0", "--allow-partial", "--json")
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout)["summary"]["cases"] == 2
    job_id = path.split("//")[1].split(":train:")[0]
    status = json.loads(_cli("tinker", "jobs", "status", job_id, "--store", store, "--workspace", "acme",
                             "--json").stdout)
    assert status["last_checkpoint"] == path and status["usage"]["optimizer_steps"] == 2
    usage = json.loads(_cli("tinker", "usage", "--store", store, "--workspace", "acme", "--json").stdout)
    assert job_id in {u["train_job_id"] for u in usage}
    other = _cli("tinker", "jobs", "status", job_id, "--store", store, "--workspace", "rival")
    assert other.returncode == 2 and "no train job" in other.stderr
    assert tables.get_checkpoint(server.store, "acme", path).purpose == "sampler"
