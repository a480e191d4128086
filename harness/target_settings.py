"""A run's target settings as the target reads them: checked and with its defaults (run.json's
`config`), and the timing bounds the clock and delay nemeses work against. Each takes the
target the run resolved (harness.resolved_run), never its name: it is looked up once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.target import SettingsChecker, SettingsError, Target, TimingBounds

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


def run_json_config(settings: Mapping[str, Any]) -> dict[str, Any]:
    """run.json's `config`: the contract's keys, then the target's settings as it runs them."""
    return {**RUN_JSON_CONFIG_KEYS, **settings}


def effective_config(target: Target, config: Mapping[str, Any]) -> dict[str, Any]:
    """The target's settings with its defaults filled in; SettingsError names a bad key."""
    if isinstance(target, SettingsChecker):
        return target.check_settings(config)
    return dict(config)


def timing_bounds(target: Target, config: Mapping[str, Any]) -> tuple[int, int]:
    """CSmax and DD in ms: the target's own, else the nemeses' defaults."""
    if isinstance(target, TimingBounds):
        return target.timing_bounds(config)
    return DEFAULT_MAX_SKEW_MS, DEFAULT_DELAY_MS


def own_settings(target: Target, config: Mapping[str, Any]) -> dict[str, Any]:
    """`config` without the run.json contract keys that the target does not have (a stored
    PostgreSQL run's `config.toggles`, say), so that `repro` gives the target its own
    settings only."""
    settings = dict(config)
    if not isinstance(target, SettingsChecker):
        return settings
    for _ in range(len(RUN_JSON_CONFIG_KEYS)):
        try:
            target.check_settings(settings)
        except SettingsError as e:
            if e.key not in RUN_JSON_CONFIG_KEYS or not e.why.startswith("unknown"):
                break  # a setting it has is bad: the run's own check names it
            del settings[e.key]
        else:
            break
    return settings
