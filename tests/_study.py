"""Submits a tuning job from the CLI and waits for its end, as a user following it would."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def submit_study(home: Path, name: str, package: Path, *, config: str = "hptuning_config.yaml",
                 timeout: float = 300, poll: float = 0.5) -> tuple[Any, list[Any]]:
    """``tfdist jobs submit training NAME --config CONFIG --package-path PACKAGE --job-dir study`` (in the
    current directory), then the study's record once final and its trials' records; fails if the study did not
    succeed, naming each trial's state and error."""
    from toolkit.cli import main
    from toolkit.jobs import JobState, JobStore, api

    assert main(["jobs", "submit", "training", name, "--config", config, "--package-path", str(package),
                 "--job-dir", "study"]) == 0
    deadline = time.monotonic() + timeout
    while not (record := api.describe(name)).is_final and time.monotonic() < deadline:
        time.sleep(poll)
    store = JobStore(home)
    trials = [store.get(child) for child in store.children(name)]
    assert record.state is JobState.SUCCEEDED, (record.error, [(t.name, t.state, t.error) for t in trials])
    return record, trials
