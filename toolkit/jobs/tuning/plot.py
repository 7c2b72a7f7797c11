"""A picture of a study: each trial's curve of measurements (stopped trials marked), and each
trial's objective against its trial id with the best so far.

matplotlib is optional (the ``test`` and ``notebooks`` extras install it); it
is imported only here, with the Agg backend, so no display is ever needed.
"""
from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolkit._owned import write_new
from toolkit.jobs.tuning._objective import TuningError

__all__ = ["plot_trials"]


def plot_trials(output: Mapping[str, Any], path: str | Path, *, goal: str | None = None) -> Path:
    """Writes a PNG of ``trainingOutput``'s trials to ``path`` and returns it.

    Raises:
        TuningError: matplotlib is not installed, or no trial has a measurement yet.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as exc:
        raise TuningError("plotting trials needs matplotlib, which is not installed. "
                          "Run `pip install matplotlib` (or install tfdist[test]).") from exc
    goal = goal or output.get("goal", "MAXIMIZE")
    trials = list(output.get("trials", []))
    points = sorted((int(t["trialId"]), t["finalMetric"]["objectiveValue"]) for t in trials
                    if "finalMetric" in t and not math.isnan(t["finalMetric"]["objectiveValue"]))
    curves = [t for t in trials if any(m.get("objectiveValue") is not None for m in t.get("allMetrics", []))]
    if not points and not curves:
        raise TuningError("no trial has an objective yet, nor any measurement, so there is nothing to plot. Wait "
                          "for a trial to report its metric, or check the trials' errors with "
                          "`toolkit.jobs.describe(name)`.")
    tag = output.get("hyperparameterMetricTag", "objective")
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(11, 4))
    _curves(left, curves, tag)
    if points:
        ids, values = zip(*points, strict=False)
        pick = max if goal == "MAXIMIZE" else min
        best = [pick(values[: i + 1]) for i in range(len(values))]
        right.scatter(ids, values, label="trial objective")
        right.step(ids, best, where="post", color="tab:orange", label=f"best so far ({goal.lower()})")
        right.legend()
    right.set_xlabel("trial")
    right.set_ylabel(tag)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    image = io.BytesIO()
    figure.savefig(image, format="png")
    pyplot.close(figure)
    write_new(path, image.getvalue(), mode=0o644)  # a new file renamed into place: never through a symlink
    return path


def _curves(axes: Any, trials: list[Mapping[str, Any]], tag: str) -> None:
    """One line per trial (step, value); a trial stopped early is dashed and ends in a cross."""
    for trial in sorted(trials, key=lambda t: int(t["trialId"])):
        metrics = [(m["trainingStep"], m["objectiveValue"]) for m in trial["allMetrics"]
                   if m.get("objectiveValue") is not None]
        steps, values = zip(*metrics, strict=False)
        stopped = trial.get("isTrialStoppedEarly")
        (line,) = axes.plot(steps, values, linestyle="--" if stopped else "-", marker=".",
                            label=f"trial {trial['trialId']}" + (" (stopped early)" if stopped else ""))
        if stopped:
            axes.plot(steps[-1], values[-1], marker="x", markersize=10, color=line.get_color())
    axes.set_xlabel("step")
    axes.set_ylabel(tag)
    axes.set_title("measurements (x: stopped early)")
    axes.legend(fontsize="small")
