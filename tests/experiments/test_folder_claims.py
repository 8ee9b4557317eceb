"""An experiment's folder is claimed by one experiment (experiment.json), also when two start into it at once; what
runs when it opens its folder runs once its settings are checked."""

from __future__ import annotations

import json
import threading
import time

import pytest

from markovformer.experiments import report


def test_two_experiments_started_at_once_into_one_new_folder_do_not_both_claim_it(tmp_path, monkeypatch):
    """Both found no experiment.json and both wrote one: the last writer's name stood, and the cells of both
    experiments were mixed in one folder. With the claim slowed between the check and the write, one claims the
    folder and the other is refused naming it."""
    write = report.atomic_write_text

    def slow_write(path, text):
        time.sleep(0.3)  # both threads have looked for the marker by now, unless the claim is held
        write(path, text)

    monkeypatch.setattr(report, "atomic_write_text", slow_write)
    outcomes = {}

    def claim(name):
        try:
            report.claim_folder(tmp_path / "out", name)
            outcomes[name] = "claimed"
        except ValueError as error:
            outcomes[name] = str(error)

    threads = [threading.Thread(target=claim, args=(name,)) for name in ("mixers", "mat-order")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    claimed = [name for name, outcome in outcomes.items() if outcome == "claimed"]
    assert len(claimed) == 1, outcomes
    other = ({"mixers", "mat-order"} - set(claimed)).pop()
    assert f"holds the experiment {claimed[0]!r} (experiment.json); give {other} another out_dir" in outcomes[other]
    marker = json.loads((tmp_path / "out" / "experiment.json").read_text())
    assert marker == {"experiment": claimed[0]}
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["experiment.json"]  # no lock file left


def test_the_same_experiment_reclaims_its_folder_and_another_is_refused(tmp_path):
    report.claim_folder(tmp_path, "mixers")
    report.claim_folder(tmp_path, "mixers")
    with pytest.raises(ValueError, match="holds the experiment 'mixers'"):
        report.claim_folder(tmp_path, "mat-order")


def test_the_action_on_opening_runs_once_the_settings_are_checked(tmp_path):
    """run_experiment's ``on_open`` (where the command line quiets Lightning, importing it) runs when the experiment
    opens its folder, its settings checked: not for a refused setting, and once however many reports open."""
    from markovformer.experiments import run_experiment

    calls = []
    with pytest.raises(ValueError, match="unknown key landscape.typo"):
        run_experiment("landscape", tmp_path / "refused", overrides={"typo": 1}, on_open=lambda: calls.append(1))
    assert calls == [] and not (tmp_path / "refused").exists()
    with report.call_on_open(lambda: calls.append(2)):
        report.ExperimentReport(tmp_path / "first", "first", log=lambda line: None)
        report.ExperimentReport(tmp_path / "second", "second", log=lambda line: None)
    report.ExperimentReport(tmp_path / "third", "third", log=lambda line: None)
    assert calls == [2]
