"""JUnit XML for release gating: one testcase per anomaly class of anomalies.md.

A CI system reads the failures without knowing schemachaos, and agrees with `run --gate`: a
class the run's `expect` names and the checker found passes and carries its witnesses in
system-out; a class found but not expected, or expected but not found, fails with the
explanations. An unknown verdict (setup failure, dead controller, missing files) is an error
testcase, never an anomaly.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from checker.anomaly_classes import ANOMALY_CLASSES  # one testcase each, in this order
from reports.expectation import allow_of, expect_of, judge

MAX_FAILURE_TEXT = 200  # explanations listed in one failure body; the rest are counted


def _failure_text(anomalies: list[Mapping[str, Any]]) -> str:
    lines = []
    for a in anomalies[:MAX_FAILURE_TEXT]:
        events = ", ".join(str(e) for e in (a.get("events") or [])[:20])
        nodes = ", ".join(str(n) for n in a.get("nodes") or [])
        lines.append(f"- {a.get('explanation', '')} [events {events}] [nodes {nodes}]")
    if len(anomalies) > MAX_FAILURE_TEXT:
        lines.append(f"... and {len(anomalies) - MAX_FAILURE_TEXT} more (see results.json)")
    return "\n".join(lines)


def junit_tree(
    results: Mapping[str, Any], run: Mapping[str, Any], expect: Sequence[str] | None = None
) -> ET.ElementTree:
    """The JUnit document for one run's results.json and run.json (`expect`: run.json's)."""
    test = str(run.get("test") or "schemachaos")
    suite_name = f"schemachaos.{test}"
    by_class: dict[str, list[Mapping[str, Any]]] = {}
    for a in results.get("anomalies") or []:
        by_class.setdefault(str(a.get("class")), []).append(a)
    verdict = judge(results, expect_of(run) if expect is None else expect, allow_of(run))
    expected = set(verdict.expect)
    extra = (set(by_class) | expected) - set(ANOMALY_CLASSES)
    classes = list(ANOMALY_CLASSES) + sorted(extra)
    not_applicable = {str(c) for c in results.get("not_applicable") or []}
    valid = results.get("valid")
    judged = valid in (True, False)
    suite = ET.Element("testsuite", name=suite_name)
    props = ET.SubElement(suite, "properties")
    for key in ("seed", "backend", "target", "clock"):
        if key in run:
            ET.SubElement(props, "property", name=key, value=str(run[key]))
    ET.SubElement(props, "property", name="valid", value=str(valid).lower())
    ET.SubElement(props, "property", name="expect", value=",".join(verdict.expect))
    ET.SubElement(props, "property", name="expectation", value=verdict.status)
    failures = errors = skipped = 0
    if not judged:
        errors += 1
        case = ET.SubElement(suite, "testcase", classname=suite_name, name="setup-and-history")
        why = [str(e) for e in results.get("errors") or []] or ["verdict unknown"]
        err = ET.SubElement(case, "error", message=why[0][:500], type="unknown-verdict")
        err.text = "\n".join(why)
    for cls in classes:
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=cls)
        found = by_class.get(cls, [])
        if found and cls in expected:
            out = ET.SubElement(case, "system-out")
            out.text = f"expected by the scenario and found:\n{_failure_text(found)}"
        elif found and cls in verdict.allowed:
            out = ET.SubElement(case, "system-out")
            why = (run.get("allow") or {}).get(cls, "")
            out.text = f"allowed by the scenario ({why}) and found:\n{_failure_text(found)}"
        elif found:
            failures += 1
            first = str(found[0].get("explanation", ""))
            msg = f"{len(found)} {cls} anomal{'y' if len(found) == 1 else 'ies'}: {first}"
            if expected:
                msg += f" (the scenario expects only {', '.join(sorted(expected))})"
            fail = ET.SubElement(case, "failure", message=msg[:1000], type=cls)
            fail.text = _failure_text(found)
        elif not judged:
            skipped += 1
            ET.SubElement(case, "skipped", message="not checked: the verdict is unknown")
        elif cls in expected:
            failures += 1
            missed = f"expected by the scenario, not found: no {cls} anomaly in this run"
            if cls in not_applicable:
                missed += " (the checker says the class is not applicable to this run)"
            fail = ET.SubElement(case, "failure", message=missed, type="missed-expectation")
            fail.text = missed
        elif cls in not_applicable:
            skipped += 1
            ET.SubElement(case, "skipped", message="not applicable to this target or workload")
    suite.set("tests", str(len(classes) + (0 if judged else 1)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="schemachaos")
    root.append(suite)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, suite.get(key, "0"))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(
    results: Mapping[str, Any],
    run: Mapping[str, Any],
    path: Path,
    expect: Sequence[str] | None = None,
) -> Path:
    junit_tree(results, run, expect).write(path, encoding="utf-8", xml_declaration=True)
    return path
