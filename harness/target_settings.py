"""A run's target settings as the target reads them: checked and with its defaults (run.json's
`config`), and the timing bounds the clock and delay nemeses work against."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harness.options import RunOptions
from harness.target import SettingsChecker, SettingsError, TimingBounds
from targets.registry import load_target

# What the clock and delay nemeses assume of a target that states no CSmax or DD of its own
DEFAULT_MAX_SKEW_MS = 500
DEFAULT_DELAY_MS = 500


# history.md: run.json's `config` has these for every target; a target without a DD, a CSmax,
# an idle SyncTime or toggles records 0 and [] (the DDL latency floor is then 0)
RUN_JSON_CONFIG_KEYS: dict[str, Any] = {
    "delay_duration_ms": 0,
    "max_clock_skew_ms": 0,
    "idle_safe_time_interval_ms": 0,
    "toggles": [],
}


def run_json_config(opts: RunOptions) -> dict[str, Any]:
    """run.json's `config`: the contract's keys, then the target's settings as it runs them."""
    return {**RUN_JSON_CONFIG_KEYS, **effective_config(opts)}


def effective_config(opts: RunOptions) -> dict[str, Any]:
    """The target's settings with its defaults filled in; SettingsError names a bad key."""
    target = load_target(opts.target)
    if isinstance(target, SettingsChecker):
        return target.check_settings(opts.target_config)
    return dict(opts.target_config)


def timing_bounds(opts: RunOptions) -> tuple[int, int]:
    """CSmax and DD in ms: the target's own, else the nemeses' defaults."""
    target = load_target(opts.target)
    if isinstance(target, TimingBounds):
        return target.timing_bounds(opts.target_config)
    return DEFAULT_MAX_SKEW_MS, DEFAULT_DELAY_MS


def own_settings(opts: RunOptions) -> RunOptions:
    """`opts` without the run.json contract keys that its target does not have (a stored
    PostgreSQL run's `config.toggles`, say), so that `repro` gives the target its own
    settings only."""
    target = load_target(opts.target)
    if not isinstance(target, SettingsChecker):
        return opts
    settings = dict(opts.target_config)
    for _ in range(len(RUN_JSON_CONFIG_KEYS)):
        try:
            target.check_settings(settings)
        except SettingsError as e:
            if e.key not in RUN_JSON_CONFIG_KEYS or not e.why.startswith("unknown"):
                break  # a setting it has is bad: the run's own check names it
            del settings[e.key]
        else:
            break
    return replace(opts, target_config=settings)
