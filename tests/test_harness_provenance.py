"""run.json's provenance: a stored run names the harness commit, the images, the target and
the Python, PySpark and Java it was made and judged with ("unknown" when it cannot know)."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest

from harness import provenance as prov
from harness.run import RunOptions, _record_images, run_json
from harness.store import new_run_dir

REPO = Path(__file__).resolve().parent.parent


def test_run_json_records_provenance(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "prov")
    opts = RunOptions(store=tmp_path, expect=("stale-schema-read",))
    data = run_json(opts, run, "local", ["n1"], ["n1"], [], [], 1234, "hlc")
    p = data["provenance"]
    assert data["expect"] == ["stale-schema-read"]
    assert p["harness_version"] == data["harness_version"]
    if (REPO / ".git").exists() and shutil.which("git"):
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        assert p["git_commit"] == head and isinstance(p["git_dirty"], bool)
    assert p["target"] == {"name": "schemasync", "version": f"in-tree at {p['git_commit']}"}
    assert p["python"].endswith(platform.python_version())
    assert p["pyspark"] == metadata.version("pyspark")
    if shutil.which("java"):
        assert "version" in p["java"]
    assert p["images"] == {}
    json.dumps(data)  # plain data


def test_outside_a_checkout_the_commit_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prov, "REPO_ROOT", tmp_path)
    assert prov.git_state() == {"commit": "unknown", "dirty": None}
    assert prov.provenance("postgres", "local", "0.1.0")["target"]["version"] == "unknown"


def test_java_unknown_without_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    prov.java_version.cache_clear()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    try:
        assert prov.java_version() == "unknown"
    finally:
        prov.java_version.cache_clear()


def test_image_tags_join_run_json_once_resolved(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "prov")
    opts = RunOptions(store=tmp_path, target="postgres")
    data = run_json(opts, run, "docker", ["n1"], ["n1"], [], [], 1234, "none")
    assert data["provenance"]["target"]["version"].startswith("PostgreSQL ")
    run.run_json.write_text(json.dumps(data))
    _record_images(run, {"node": "schemachaos-postgres:0123456789abcdef"})
    again = json.loads(run.run_json.read_text())
    assert again["provenance"]["images"] == {"node": "schemachaos-postgres:0123456789abcdef"}
    assert {k: v for k, v in again.items() if k != "provenance"} == {
        k: v for k, v in data.items() if k != "provenance"
    }
