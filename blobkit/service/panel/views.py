"""What the job page draws, computed from the job's record: the per-step chart, the pass-rate chart, the replay
verdict in words. Charts are inline SVG geometry (no script, no chart library); numbers are the record's.
"""

from __future__ import annotations

from trainers.intervals import share

from ..records import Record, TrainingJob
from ..steps import step_line

CHART_W, CHART_H, MARGIN = 480.0, 180.0, 36.0
BAR_X, BAR_W = 60.0, 360.0
TERMINAL = ("kit_ready", "succeeded", "failed", "cancelled")
"""Job statuses that do not change any more (the page stops polling)."""


class Dot(Record):
    """One plotted point."""

    x: float
    """SVG x."""
    y: float
    """SVG y."""
    label: str
    """What it is (shown as its tooltip)."""


class LineChart(Record):
    """A metric per training step."""

    title: str
    """What is plotted."""
    metric: str
    """``loss`` or ``reward``."""
    dots: list[Dot]
    """The points, in step order."""
    polyline: str
    """The SVG ``points`` of the line through them."""
    y_min: float
    """The lowest value (bottom of the axis)."""
    y_max: float
    """The highest value (top of the axis)."""
    last_step: int
    """The last step plotted."""
    steps: int
    """Steps the stage plans."""


class RateBar(Record):
    """One model's held-out pass rate with its 95 % interval."""

    label: str
    """Base, SFT or RL."""
    y: float
    """SVG y of the bar."""
    width: float
    """Bar width (SVG units, the pass rate of BAR_W)."""
    lo_x: float
    """x of the interval's low end."""
    hi_x: float
    """x of the interval's high end."""
    percent: str
    """The pass rate as a percentage, for the bar's end."""
    text: str
    """The numbers in words."""


def _series(job: TrainingJob, stage: str, metric: str) -> list[tuple[int, float, int]]:
    """(step, value, steps) of every progress line of ``stage`` over the job's attempts; a later attempt's value
    for a step replaces an earlier one's."""
    found: dict[int, tuple[float, int]] = {}
    for attempt in job.attempts:
        for event in attempt.events:
            line = step_line(event.message) if event.stage == stage else None
            value = None if line is None else getattr(line, metric)
            if line is not None and value is not None:
                found[line.step] = (float(value), line.steps)
    return [(step, value, steps) for step, (value, steps) in sorted(found.items())]


def line_chart(job: TrainingJob, stage: str, metric: str, title: str) -> LineChart | None:
    """The chart of ``metric`` per step of ``stage``; None before any step was reported."""
    series = _series(job, stage, metric)
    if not series:
        return None
    steps = max(planned for _, _, planned in series)
    low, high = min(v for _, v, _ in series), max(v for _, v, _ in series)
    span = (high - low) or 1.0
    x_span = max(steps - 1, 1)
    dots = [Dot(x=round(MARGIN + (CHART_W - 2 * MARGIN) * (step - 1) / x_span, 1),
                y=round(CHART_H - MARGIN - (CHART_H - 2 * MARGIN) * (value - low) / span, 1),
                label=f"step {step}: {metric} {value:.4g}") for step, value, _ in series]
    return LineChart(title=title, metric=metric, dots=dots, polyline=" ".join(f"{d.x},{d.y}" for d in dots),
                     y_min=low, y_max=high, last_step=series[-1][0], steps=steps)


def charts(job: TrainingJob) -> list[LineChart]:
    """The SFT loss and the GRPO reward per step, those reported so far."""
    made = [line_chart(job, "sft", "loss", "SFT loss per step"), line_chart(job, "rl", "reward", "GRPO mean reward "
                                                                                                   "per step")]
    return [chart for chart in made if chart is not None]


def rate_bars(job: TrainingJob) -> list[RateBar]:
    """Base, SFT and RL held-out pass rates with their 95 % intervals (those measured)."""
    results, bars = job.results, list[RateBar]()
    if results is None:
        return []
    for label, rate in (("Base", results.base), ("SFT", results.sft), ("RL", results.rl)):
        if rate is None:
            continue
        lo, hi = rate.interval_95 or (rate.pass_rate, rate.pass_rate)
        entities = "" if rate.entities is None else f", {rate.entities} independent entities"
        percent = 100 * share(rate.passed, rate.cases)
        bars.append(RateBar(label=label, y=12.0 + 40.0 * len(bars), width=round(BAR_W * rate.pass_rate, 1),
                            lo_x=round(BAR_X + BAR_W * lo, 1), hi_x=round(BAR_X + BAR_W * hi, 1),
                            percent=f"{percent:.0f} %",
                            text=f"{label}: {percent:.1f} % ({rate.passed}/{rate.cases} held-out cases"
                                 f"{entities}; 95 % interval {100 * lo:.1f}–{100 * hi:.1f} %)"))
    return bars


def replay_words(job: TrainingJob) -> str | None:
    """The replay verdict as a sentence, or None when no replay ran."""
    replay = job.replay
    if replay is None:
        return None
    case = f"case {replay.case_id}" + (f" ({replay.template})" if replay.template else "")
    if replay.outcome == "error":
        return f"The exported model could not be replayed in a fresh process on {case}: {replay.error or 'error'}."
    how = ""
    if replay.turns is not None:
        how = f" in {replay.turns} turn(s)" + (f" with {replay.tool_calls} tool call(s)"
                                              if replay.tool_calls is not None else "")
    return f"The exported model, reloaded fresh, {replay.outcome} {case}{how}."
