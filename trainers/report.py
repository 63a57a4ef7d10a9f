"""What a run reports: the eval.json record of an SFT run, and the plot every run writes (``training.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .eval_record import SFTReport
from .paired import PairedComparison, compare

if TYPE_CHECKING:
    from .evaluation import EvalSummary
    from .fit import FitResult


def plot_training(out: Path, series: list[tuple[int, float]], evals: dict[str, float], *,
                  title: str = "training loss", ylabel: str = "loss") -> None:
    """A PNG with the per-step series (loss, or GRPO reward) and the held-out pass rates side by side.

    ``evals`` maps "base", "sft", "rl" and "rft" (those present) to their held-out pass rates.
    The PNG carries no software or time metadata, so the same figures give the same bytes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    if series:
        left.plot([s for s, _ in series], [v for _, v in series], marker="." if len(series) < 50 else None)
    left.set(title=title, xlabel="optimizer step" if ylabel == "loss" else "step", ylabel=ylabel)
    names = [n for n in ("base", "sft", "rl", "rft") if n in evals]
    right.bar(names, [evals[n] for n in names], color=["#999", "#3a7", "#37a", "#a73"][: len(names)])
    right.set(title="held-out pass rate", ylim=(0, 1))
    figure.tight_layout()
    figure.savefig(out, dpi=100, metadata={"Software": None})
    plt.close(figure)


def sft_report(base: EvalSummary, sft: EvalSummary, fit: FitResult, kit_sha256: str) -> SFTReport:
    """The eval.json record of an SFT run (any target): base and SFT on the same held-out cases."""
    return SFTReport(base=base.record(), sft=sft.record(), optimizer_updates=fit.optimizer_updates,
                     stopped_by=fit.stopped_by, model_calls=base.model_calls + sft.model_calls,
                     train_seconds=round(fit.train_seconds, 1), loss_history=fit.history, kit_sha256=kit_sha256,
                     sft_minus_base=round(sft.pass_rate - base.pass_rate, 4),
                     sft_vs_base=paired(base, sft, "base", "sft"))


def paired(earlier: EvalSummary, later: EvalSummary, earlier_name: str, later_name: str) -> PairedComparison:
    """The paired comparison of two evaluations of the same held-out cases (:mod:`trainers.paired`)."""
    return compare(earlier.outcomes(), later.outcomes(), earlier_name=earlier_name, later_name=later_name)
