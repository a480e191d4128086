"""What a run prints while it goes, without a terminal (CI): a line per phase and per fault as
it happens, the controller's log with -v, and a summary naming the faults that ran."""

from __future__ import annotations

import io
import logging
from pathlib import Path

from harness.progress import LineProgress, render
from harness.run import ObservedRecorder, RunProgress


def _play(state: RunProgress, recorder: ObservedRecorder) -> None:
    """A run's life as the orchestrator reports it: phases, two faults, then heal-all."""
    state.set_phase("provisioning")
    recorder.notify()
    state.set_phase("running")
    recorder.notify()
    recorder.nemesis("start-partition", {"kind": "partition", "fault": 1, "nodes": ["n4"]})
    recorder.nemesis("heal-partition", {"kind": "partition", "fault": 1})
    recorder.nemesis("start-clock", {"kind": "clock", "fault": 2, "offsets": {"n1": 0.3}})
    recorder.nemesis("start-partition", {"kind": "partition", "fault": 3, "nodes": ["n1"]})
    state.set_phase("healing")
    recorder.notify()
    recorder.nemesis("stop-clock", {"kind": "clock", "fault": 2, "by": "heal-all"})
    recorder.nemesis("heal-partition", {"kind": "partition", "fault": 3, "by": "heal-all"})
    recorder.nemesis("heal-all", {})
    state.set_phase("done: valid=True")
    recorder.notify()


class _Recorder(ObservedRecorder):
    def notify(self) -> None:
        self._notify()


def test_lines_per_phase_and_fault_and_the_faults_that_ran(tmp_path: Path) -> None:
    out = io.StringIO()
    state = RunProgress(time_limit_s=10)
    display = LineProgress(out)
    with display:
        recorder = _Recorder(tmp_path / "history.jsonl", 0, state, lambda: display.update(state))
        _play(state, recorder)
        recorder.close()
    lines = out.getvalue().splitlines()
    text = [line.split("] ", 1)[1] if "] " in line else line for line in lines]
    assert text[:4] == [
        "phase: provisioning",
        "phase: running",
        "start-partition n4",
        "heal-partition",
    ]
    assert "start-clock n1" in text and "phase: healing" in text and "heal-all" in text
    assert text.count("phase: running") == 1  # a line when it happens, once
    # heal-all emptied what is in force, not what ran
    assert state.faults == {}
    assert lines[-1] == "faults run: clock ×1, partition ×2"
    table = io.StringIO()
    from rich.console import Console

    Console(file=table, width=120).print(render(state))
    assert "faults run  clock ×1, partition ×2" in table.getvalue()


def test_verbose_streams_the_controller_log() -> None:
    out = io.StringIO()
    with LineProgress(out, verbose=True):
        logging.getLogger("schemachaos").setLevel(logging.DEBUG)
        logging.getLogger("schemachaos.run").info("provisioning 5 nodes")
    logging.getLogger("schemachaos.run").info("after the run: not streamed")
    text = out.getvalue()
    assert "INFO schemachaos.run: provisioning 5 nodes" in text
    assert "not streamed" not in text
