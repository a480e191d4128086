"""run.json's provenance: a stored run names the harness commit, the images, the target and
the Python, PySpark and Java it was made and judged with ("unknown" when it cannot know)."""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

from contract.remote import Remote
from contract.target import VersionReporter
from harness import provenance as prov
from harness.remote_local import LocalRemote
from harness.resolved_run import resolve_run
from harness.run import RunOptions, _update_provenance, run_json
from harness.store import new_run_dir
from targets.postgres import PostgresTarget
from targets.schemasync import SchemaSyncTarget
from tests.conftest import require

REPO = Path(__file__).resolve().parent.parent


def test_run_json_records_provenance(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "prov")
    opts = RunOptions(
        backend="local", nodes=1, voters=1, store=tmp_path, expect=("stale-schema-read",)
    )
    data = run_json(resolve_run(opts), run, 1234)
    p = data["provenance"]
    assert data["expect"] == ["stale-schema-read"]
    assert p["harness_version"] == data["harness_version"]
    if (REPO / ".git").exists() and shutil.which("git"):
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        assert p["git_commit"] == head and isinstance(p["git_dirty"], bool)
    assert p["target"] == {"name": "schemasync", "version": "unknown"}  # asked once set up
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


def test_java_unknown_without_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    prov.java_version.cache_clear()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    try:
        assert prov.java_version() == "unknown"
    finally:
        prov.java_version.cache_clear()


def test_image_tags_join_run_json_once_resolved(tmp_path: Path) -> None:
    run = new_run_dir(tmp_path, "prov")
    opts = RunOptions(backend="docker", nodes=1, voters=1, store=tmp_path, target="postgres")
    data = run_json(resolve_run(opts), run, 1234)
    run.run_json.write_text(json.dumps(data))
    _update_provenance(run, "images", {"node": "schemachaos-postgres:0123456789abcdef"})
    again = json.loads(run.run_json.read_text())
    assert again["provenance"]["images"] == {"node": "schemachaos-postgres:0123456789abcdef"}
    assert {k: v for k, v in again.items() if k != "provenance"} == {
        k: v for k, v in data.items() if k != "provenance"
    }


@dataclass
class OneNode:
    """A ClusterView of one real local node (the target asks it through a real Remote)."""

    remotes: dict[str, Remote]
    nodes: list[str] = field(default_factory=lambda: ["n1"])
    voters: list[str] = field(default_factory=lambda: ["n1"])
    learners: list[str] = field(default_factory=list)
    backend: str = "local"
    node_dirs: dict[str, str] = field(default_factory=lambda: {"n1": "/tmp/prov-n1"})
    python: str = sys.executable
    code_dir: str | None = str(REPO)
    upload_code_to: str | None = None
    ports: dict[str, int] = field(default_factory=dict)


def test_targets_report_their_version_through_the_protocol() -> None:
    assert isinstance(SchemaSyncTarget(), VersionReporter)
    assert isinstance(PostgresTarget(), VersionReporter)
    assert prov.target_version(object(), "n1") == "unknown"  # a target that cannot tell


def test_schemasync_version_is_the_digest_of_the_sources_the_node_imports(
    tmp_path: Path,
) -> None:
    target = SchemaSyncTarget()
    target.cluster = OneNode({"n1": LocalRemote("n1", "127.0.0.1", "prov")})
    version = prov.target_version(target, "n1")
    assert version.startswith("schemasync sources sha256:") and len(version) == 42
    copy = tmp_path / "schemasync"
    shutil.copytree(REPO / "schemasync", copy, ignore=shutil.ignore_patterns("__pycache__"))
    target.cluster.code_dir = str(tmp_path)
    assert prov.target_version(target, "n1") == version  # same sources, same digest
    (copy / "toggles.py").write_text((copy / "toggles.py").read_text() + "\n# changed\n")
    assert prov.target_version(target, "n1") != version
    target.cluster.python = str(tmp_path / "no-python")
    assert prov.target_version(target, "n1") == "unknown"  # never fails the run


def test_postgres_version_is_what_the_node_binary_says() -> None:
    require(  # in CI a failure, not a skip: the machine's image has PostgreSQL 15
        bool(list(Path("/usr/lib/postgresql").glob("*/bin/postgres"))),
        "no PostgreSQL server binaries on this machine (the postgres image has them)",
    )
    target = PostgresTarget()
    target.cluster = OneNode({"n1": LocalRemote("n1", "127.0.0.1", "prov")})
    version = prov.target_version(target, "n1")
    assert version.startswith("postgres (PostgreSQL) "), version
    newest = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"))[-1]
    assert version.split()[2].split(".")[0] == newest.parent.parent.name
