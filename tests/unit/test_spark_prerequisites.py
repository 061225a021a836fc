"""Before any work, a run that will use Spark checks that this process can start it: PySpark
importable, and a Java 17+ where PySpark's launcher looks (``$JAVA_HOME/bin/java``, else PATH)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airflow_provider_kinesis_doris.core.errors import ConfigurationError
from airflow_provider_kinesis_doris.spark.runner import SparkSettings, check_prerequisites, java_version

LOCAL = SparkSettings(master="local[2]")


def a_java(folder: Path, says: str) -> Path:
    """A ``bin/java`` under ``folder`` that answers ``-version`` as the given runtime does."""
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho '{says}' >&2\n")
    java.chmod(0o755)
    return folder


def test_without_pyspark_the_error_names_the_extra_and_java(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # what the import system sees when it is not installed
    with pytest.raises(ConfigurationError) as error:
        check_prerequisites(LOCAL)
    message = str(error.value)
    assert "needs PySpark" in message and "airflow-provider-kinesis-doris[spark]" in message
    assert "Java 17+" in message and "runner=InProcessRunner()" in message


def test_without_java_the_error_says_where_it_looked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(ConfigurationError, match=rf"needs Java 17\+; there is none on JAVA_HOME={tmp_path}: install"):
        check_prerequisites(LOCAL)


@pytest.mark.parametrize(
    ("says", "major"), [('openjdk version "11.0.2" 2019-01-15', 11), ('java version "1.8.0_292"', 8)]
)
def test_an_older_java_is_refused_with_its_version(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, says: str, major: int) -> None:
    monkeypatch.setenv("JAVA_HOME", str(a_java(tmp_path, says)))
    with pytest.raises(ConfigurationError, match=rf"from JAVA_HOME=.*\) is Java {major}: install"):
        check_prerequisites(LOCAL)


@pytest.mark.parametrize(("says", "major"), [('openjdk version "17" 2021-09-14', 17), ('openjdk version "21.0.4" 2024-07-16', 21)])
def test_java_17_and_later_pass(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, says: str, major: int) -> None:
    # The counterpart of the refusals above, at the boundary: the same check with a newer runtime.
    home = a_java(tmp_path, says)
    assert java_version(str(home / "bin" / "java")) == major
    monkeypatch.setenv("JAVA_HOME", str(home))
    check_prerequisites(LOCAL)


def test_spark_connect_needs_pyspark_but_no_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    connect = SparkSettings(remote="sc://127.0.0.1:15002")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "none"))
    check_prerequisites(connect)  # the same JAVA_HOME fails a local session (above)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    with pytest.raises(ConfigurationError, match="needs PySpark"):
        check_prerequisites(connect)


def test_spark_connect_without_its_client_dependencies_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark imports, but not its Spark Connect client: pandas (of pyspark's ``connect`` extra) is
    missing, as it was in an install without pyspark-client. The task fails before it plans."""
    monkeypatch.delitem(sys.modules, "pyspark.sql.connect.session", raising=False)  # imported afresh
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ConfigurationError) as error:
        check_prerequisites(SparkSettings(remote="sc://127.0.0.1:15002"))
    message = str(error.value)
    assert "needs PySpark's Spark Connect client" in message and "pandas" in message.lower()
    assert "airflow-provider-kinesis-doris[spark,apache-spark]" in message
