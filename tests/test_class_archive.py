"""The class archive that `make setup` builds (checker.class_archive) maps in a JVM started as
Spark starts its driver: with `-Xshare:on` a JVM refuses to start on an archive that does not
match its JDK or class path, so an archive silently ignored fails here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyspark
import pytest

from checker import session
from tests.conftest import require


def test_the_class_archive_maps_in_a_jvm_with_sparks_class_path() -> None:
    require(shutil.which("java") is not None, "the archive is for a Java runtime (java on PATH)")
    require(session.CLASS_ARCHIVE.is_file(), f"make setup builds {session.CLASS_ARCHIVE}")
    home = Path(pyspark.__file__).resolve().parent
    # the class path of Spark's launcher (bin/spark-class): conf, slf4j's API first, every jar
    slf4j = sorted((home / "jars").glob("slf4j-api-*.jar"))
    class_path = ":".join([str(home / "conf"), *map(str, slf4j), str(home / "jars" / "*")])
    out = subprocess.run(
        [
            "java",
            "-Xshare:on",
            *session.archive_options().split(),
            "-Xlog:class+load=info",
            "-cp",
            class_path,
            "org.apache.spark.deploy.SparkSubmit",
            "--version",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    archived = [line for line in out.stdout.splitlines() if "shared objects file (top)" in line]
    assert any(" org.apache.spark.deploy.SparkSubmit source:" in line for line in archived)
    assert len(archived) > 1000, f"only {len(archived)} classes came from the archive"


def test_no_archive_no_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "CLASS_ARCHIVE", tmp_path / "none.jsa")
    assert session.archive_options() == ""
