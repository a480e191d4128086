"""JUnit XML for release gating: one testcase per anomaly class of anomalies.md.

A CI system reads the failures without knowing schemachaos: each failure carries the one-sentence
explanations of the anomalies of its class; an unknown verdict (setup failure, dead controller,
missing files) is an error testcase, never an anomaly.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ANOMALY_CLASSES = (
    "ap-violation",
    "mixed-schema-commit",
    "transborder-op",
    "incompatible-commit",
    "stale-schema-read",
    "schema-conformance",
    "lost-write",
    "lost-ddl",
    "index-missing",
    "index-orphan",
    "activation-order",
)
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


def junit_tree(results: Mapping[str, Any], run: Mapping[str, Any]) -> ET.ElementTree:
    """The JUnit document for one run's results.json and run.json."""
    test = str(run.get("test") or "schemachaos")
    suite_name = f"schemachaos.{test}"
    by_class: dict[str, list[Mapping[str, Any]]] = {}
    for a in results.get("anomalies") or []:
        by_class.setdefault(str(a.get("class")), []).append(a)
    classes = list(ANOMALY_CLASSES) + sorted(set(by_class) - set(ANOMALY_CLASSES))
    not_applicable = {str(c) for c in results.get("not_applicable") or []}
    valid = results.get("valid")
    suite = ET.Element("testsuite", name=suite_name)
    props = ET.SubElement(suite, "properties")
    for key in ("seed", "backend", "target", "clock"):
        if key in run:
            ET.SubElement(props, "property", name=key, value=str(run[key]))
    ET.SubElement(props, "property", name="valid", value=str(valid).lower())
    failures = errors = skipped = 0
    if valid not in (True, False):
        errors += 1
        case = ET.SubElement(suite, "testcase", classname=suite_name, name="setup-and-history")
        why = [str(e) for e in results.get("errors") or []] or ["verdict unknown"]
        err = ET.SubElement(case, "error", message=why[0][:500], type="unknown-verdict")
        err.text = "\n".join(why)
    for cls in classes:
        case = ET.SubElement(suite, "testcase", classname=suite_name, name=cls)
        found = by_class.get(cls, [])
        if found:
            failures += 1
            first = str(found[0].get("explanation", ""))
            msg = f"{len(found)} {cls} anomal{'y' if len(found) == 1 else 'ies'}: {first}"
            fail = ET.SubElement(case, "failure", message=msg[:1000], type=cls)
            fail.text = _failure_text(found)
        elif cls in not_applicable:
            skipped += 1
            ET.SubElement(case, "skipped", message="not applicable to this target or workload")
        elif valid not in (True, False):
            skipped += 1
            ET.SubElement(case, "skipped", message="not checked: the verdict is unknown")
    suite.set("tests", str(len(classes) + (1 if valid not in (True, False) else 0)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    root = ET.Element("testsuites", name="schemachaos")
    root.append(suite)
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, suite.get(key, "0"))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(results: Mapping[str, Any], run: Mapping[str, Any], path: Path) -> Path:
    junit_tree(results, run).write(path, encoding="utf-8", xml_declaration=True)
    return path
