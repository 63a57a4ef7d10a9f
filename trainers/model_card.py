"""The model card every export carries (``export/README.md``): what the model is, how it was made, how it did.

Written after the exported model was reloaded and evaluated, so the held-out results are the export's
own: the base (id or path, source, revision, sha256 and its license), the kit and its sha256, the
method and its settings (all of them in ``train_config.json``), the held-out pass rates with their
95 % intervals and entity counts, why training stopped, and how to load, score and serve the export.
:func:`add_model_card` adds it to the export's manifest, so it is checksummed like every other file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from world_format.manifest import write_manifested_dir

from .catalog import CATALOG
from .config import TrainConfig
from .eval_record import TrainingReport

CARD = "README.md"
LOCAL_LICENSE = "not known to blobkit: a local model directory (see the license that came with it)"


def base_license(base: dict[str, Any]) -> str:
    """The license of a catalog base, or what is known of a local one."""
    entry = next((e for e in CATALOG if e.id == base.get("id")), None)
    return entry.license if entry is not None else LOCAL_LICENSE


def _results(report: TrainingReport) -> list[str]:
    rows = ["| model | held-out pass rate (cases, entities, 95 % interval) |", "|---|---|"]
    evaluations = report.evaluations()
    rows += [f"| {name} | {record.text()} |" for name, record in evaluations.items()]
    notes = []
    if report.stopped_by:
        notes.append(f"Training stopped early: `stopped_by: {report.stopped_by}`.")
    end = evaluations.get("rl") or evaluations.get("rft") or evaluations.get("sft")
    if end is not None and end.partial:
        notes.append(f"Partial: {end.cases} of the kit's {end.cases_in_side} held-out cases were "
                     f"evaluated (`eval_limit` {report.eval_limit}), so the rate is no claim about the whole "
                     "held-out set.")
    return rows + ([""] + notes if notes else [])


def model_card(config: TrainConfig, manifest: dict[str, Any], report: TrainingReport, world: str) -> str:
    """The card's Markdown for an export with ``manifest``, trained with ``config``, evaluated in ``report``."""
    base, kind = manifest["base"], manifest["kind"]
    name = base.get("id") or base["name_or_path"]
    pinned = f", sha256 `{base['sha256']}`" if base.get("sha256") else ""
    rank = config.lora_rank
    shape = "every weight" if kind == "full" else f"a LoRA adapter (rank {rank}, alpha {2 * rank})"
    steps = {"sft": f"{config.epochs:g} epochs",
             "rft": f"{config.epochs:g} epochs on the verifier-passed episodes of {config.rft_samples} sampled per "
                    f"training case at temperature {config.rft_temperature:g}"
                    + (", and the kit rows of cases with none kept" if config.rft_fill == "reference" else "")}.get(
        config.method, f"{config.steps} steps, group {config.group_size}")
    lines = [
        f"# {world}: {name}, {config.method.upper()} ({kind})", "",
        f"A tool-calling agent for the world `{world}`, trained by blobkit on its kit, {shape}.", "",
        "## How it was made", "",
        f"- Base: `{name}` ({base['source']}, revision `{base['revision']}`{pinned}); license: {base_license(base)}.",
        f"- Kit: sha256 `{manifest.get('kit_sha256')}` (`blobkit info KIT` shows its split, gate and adversaries).",
        f"- Method: {config.method.upper()} on {config.target}, {steps}, learning rate {config.learning_rate:g}, "
        f"batch {config.batch_size}, max length {config.max_length}, seed {config.seed}, tool format "
        f"{config.tool_format}; every setting is in `train_config.json`.",
        f"- {report.optimizer_updates} optimizer updates in {getattr(report, 'train_seconds', 0):.0f} s.", "",
        "## Held-out results", "",
        "Each case is a whole episode on an isolated copy of the world's seed, judged by its verifier (VCode) and "
        "the world's declared procedures; the cases concern entities no training row mentions.", "",
        *_results(report), "",
        "## Load, score and serve", "",
        "```bash",
        "blobkit replay --model export --kit KIT          # one held-out case, in a fresh process",
        "blobkit eval --model export --kit KIT            # every held-out case",
        "```", "",
        "```python",
        "from trainers.export import load_export",
        "model, tokenizer, manifest = load_export(\"export\")  # verifies every file's sha256 first",
        "```", "",
        ("The folder is a standard Hugging Face model (safetensors), so a server that reads one (vLLM, text "
         "generation inference) serves it as it is; prompts must use the tool format above." if kind == "full" else
         "It is a PEFT adapter on the pinned base: load it with `load_export`, or export with `--merge` for a full "
         "model folder that a server that reads Hugging Face models (vLLM, text generation inference) serves."),
        "", "Every file is listed with its sha256 in `manifest.json`; a changed file is refused on load.", "",
    ]
    return "\n".join(lines)


def add_model_card(export: Path, card: str) -> None:
    """Rewrite ``export`` with ``card`` as its README.md, listed in its manifest (atomically, the manifest last)."""
    from world_format.canonical import canonical_bytes

    from .export import MANIFEST, verify_export

    manifest = verify_export(export)
    files: dict[str, Any] = {name: Path(export) / name for name in manifest["files"] if name != CARD}
    files[CARD] = card.encode("utf-8")
    document = {key: value for key, value in manifest.items() if key != "files"}

    def render(table: dict[str, Any]) -> bytes:
        return canonical_bytes({**document, "files": table}) + b"\n"

    write_manifested_dir(Path(export), files, MANIFEST, render)
