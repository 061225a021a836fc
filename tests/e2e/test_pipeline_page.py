"""The "Kinesis → Doris" page (``airflow_provider_kinesis_doris.ui``) in a real Airflow 3 API
server on loopback, after real loads of the example DAG through a split and a merge: headless
Chromium reads what a person sees (the lineage, the loaded counts, a failed interval), and a user
who may not read the DAG, or nobody at all, gets none of it.

The loads run in this process (``dag.test()``, the in-process runner); the API server is started
once for the module, with the same metadata DB, and stopped by its PID.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from airflow_provider_kinesis_doris.version_compat import AIRFLOW_VERSION
from kinesis_doris_devstack.scenario import create_stream, event, merge, now_ms, put_events, split, wait_past
from kinesis_doris_devstack.stack import free_port, stop_pid
from tests.conftest import REPO_ROOT, events_table_on_local_stack
from tests.e2e.airflow_services import _wait_healthy
from tests.e2e.conftest import CHECKPOINT_TABLE, DB, load_example_dag, run_dag_test

pytestmark = [
    pytest.mark.airflow,
    pytest.mark.e2e,
    pytest.mark.airflow3,  # not collected by make test's 2.11 run (make test-af2)
    pytest.mark.timeout(400),
    pytest.mark.skipif(AIRFLOW_VERSION < Version("3.1.0"), reason="plugins serve FastAPI apps from Airflow 3.1 on"),
]

DAG_ID, TASK_ID = "kinesis_to_doris_example", "load_interval"
PAGE = f"/kinesis-doris/pipelines/{DAG_ID}/{TASK_ID}"
API = f"/kinesis-doris/api/pipelines/{DAG_ID}/{TASK_ID}"
PASSWORDS = {"viewer": "viewer-pw-1", "outsider": "outsider-pw-1"}
SCREENSHOT = REPO_ROOT / "docs" / "images" / "pipeline-page.png"
PER_INTERVAL = 12
PAGE_INTERVAL_S = 5
"""Long enough for a split or a merge on kinesis-mock to finish inside the interval it starts in."""


def _grid(count: int) -> list[int]:
    """Interval bounds (epoch ms) on the DAG's grid, from the next bound on."""
    step = PAGE_INTERVAL_S * 1000
    first = (now_ms() // step + 1) * step
    return [first + i * step for i in range(count + 1)]


def _iso(epoch_ms: int) -> str:
    """An instant as the page's cells give it (``data-start``)."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def loaded(airflow_db, kinesis_mock_endpoint, dynamodb_endpoint, doris_server) -> Iterator[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Three intervals loaded through a split (interval 1) and a merge (interval 2); the fourth
    interval's run fails (Doris refuses the password). Shards and counts as Kinesis and Doris say."""
    from tests.conftest import _client

    kinesis = _client("kinesis", kinesis_mock_endpoint)
    stamp = datetime.now().strftime("%H%M%S%f")
    stream, table = f"page-{stamp}", f"page_{stamp}"
    with pytest.MonkeyPatch.context() as monkeypatch:
        first, second = create_stream(kinesis, stream, 2)
        events_table_on_local_stack(monkeypatch, kinesis_mock_endpoint, dynamodb_endpoint, doris_server, DB, table)
        good_connections = {name: os.environ[name] for name in ("AIRFLOW_CONN_AWS_DEFAULT", "AIRFLOW_CONN_DORIS_DEFAULT")}
        for key, value in {
            "KD_EXAMPLE_STREAM": stream, "KD_EXAMPLE_TABLE": f"{DB}.{table}", "KD_EXAMPLE_CHECKPOINT_TABLE": CHECKPOINT_TABLE,
            "KD_EXAMPLE_INTERVAL_SECONDS": str(PAGE_INTERVAL_S), "KD_EXAMPLE_SEAL_GRACE_SECONDS": "0",
            "KD_EXAMPLE_USE_SPARK": "false",
        }.items():  # fmt: skip
            monkeypatch.setenv(key, value)

        bounds = _grid(4)
        produced = 0
        for i in range(4):
            wait_past(bounds[i])
            put_events(kinesis, stream, [event(i * 1000 + n) for n in range(PER_INTERVAL)])
            produced += PER_INTERVAL if i < 3 else 0  # the fourth interval's run fails: nothing of it loads
            if i == 0:
                low, high = split(kinesis, stream, first)
            elif i == 1:
                merged = merge(kinesis, stream, high, second)
            assert now_ms() < bounds[i + 1], "the interval passed before its events and its reshard were in"
        wait_past(bounds[4])

        dag = load_example_dag()
        dag.get_task(TASK_ID).retries = 0  # the failed run fails at once, not after two retry delays
        for end in bounds[1:4]:
            run = run_dag_test(dag, datetime.fromtimestamp(end / 1000, tz=timezone.utc))
            assert "success" in str(run.state), run.state
        doris = json.loads(os.environ["AIRFLOW_CONN_DORIS_DEFAULT"])
        monkeypatch.setenv("AIRFLOW_CONN_DORIS_DEFAULT", json.dumps({**doris, "password": "not-the-password"}))
        failed = run_dag_test(dag, datetime.fromtimestamp(bounds[4] / 1000, tz=timezone.utc))
        assert "failed" in str(failed.state), failed.state

        yield {
            "stream": stream,
            "table": table,
            "connections": good_connections,
            "lineage": {low: (first,), high: (first,), merged: (high, second), first: (), second: ()},
            "rows": produced,
            "failed_start_ms": bounds[3],
            "interval_starts_ms": bounds[:4],
            "doris_rows": doris_server.execute_sql(DB, f"SELECT COUNT(*) FROM {table}")[0][0],
        }


@pytest.fixture(scope="module")
def api_server(loaded: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Airflow's API server with the provider's plugin, on loopback, its users ``viewer`` (may read
    every DAG) and ``outsider`` (no role: may read none); stopped by its PID."""
    home = tmp_path_factory.mktemp("page-api-server")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps(PASSWORDS))
    port = free_port()
    env = {
        **os.environ,
        **loaded["connections"],
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "viewer:viewer,outsider:",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
    }
    with open(home / "api-server.log", "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/api/v2/monitor/health", server, timeout=180)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_pid(server.pid, timeout=15)


def _token(base: str, user: str) -> str:
    body = json.dumps({"username": user, "password": PASSWORDS[user]}).encode()
    request = urllib.request.Request(f"{base}/auth/token", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback
        return json.load(answer)["access_token"]


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as answer:  # noqa: S310
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_the_page_shows_the_lineage_the_loaded_rows_and_the_failed_interval(
    loaded: dict[str, Any], api_server: str, tmp_path: Path
) -> None:
    from tests.e2e.headless_chromium import chromium

    token = _token(api_server, "viewer")
    with chromium() as page:
        # The UI's own cookie: what a person signed in to Airflow carries.
        page.call("Network.enable")
        page.call("Network.setCookie", name="_token", value=token, url=api_server)
        page.open(f"{api_server}{PAGE}")
        text = page.evaluate("document.body.innerText")
        shards = page.evaluate(
            "Array.from(document.querySelectorAll('#lineage [data-shard]')).map(s => ({"
            " shard: s.dataset.shard, parents: s.dataset.parents ? s.dataset.parents.split(' ') : [],"
            " drawnUnder: (s.closest('ul').closest('li') || {querySelector: () => null}).querySelector('[data-shard]')"
            "   ? s.closest('ul').closest('li').querySelector('[data-shard]').dataset.shard : null}))"
        )
        cells = page.evaluate(
            "Array.from(document.querySelectorAll('#intervals [data-status]'))"
            ".map(c => ({start: c.dataset.start, status: c.dataset.status, href: c.getAttribute('href')}))"
        )
        rows_in_doris = page.evaluate("document.getElementById('rows-in-doris').innerText")
        rows_loaded = page.evaluate("document.getElementById('rows-loaded').innerText")
        shot = page.screenshot(tmp_path / "pipeline-page.png")

    assert shot.stat().st_size > 10_000
    if os.environ.get("KD_UPDATE_SCREENSHOT"):  # `KD_UPDATE_SCREENSHOT=1 pytest ...` refreshes the README's picture
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)

    assert f"Pipeline {loaded['stream']}.{DB}.{loaded['table']}" in text
    # The lineage: every shard with the parents Kinesis gave it, drawn under its (first) parent.
    seen = {entry["shard"]: entry for entry in shards}
    assert {shard: tuple(entry["parents"]) for shard, entry in seen.items()} == loaded["lineage"]
    for shard, parents in loaded["lineage"].items():
        assert seen[shard]["drawnUnder"] == (parents[0] if parents else None), seen[shard]
    # The loaded counts: the checkpoint table's and Doris's, both what was produced and loaded.
    assert int(rows_in_doris) == loaded["doris_rows"] == loaded["rows"]
    assert int(rows_loaded) == loaded["rows"]
    # The grid: three loaded intervals and the failed one, each linking to its DAG run. The grid
    # shows every recent run of the DAG: in make test, other tests' runs of the example DAG too.
    ours = [_iso(start_ms) for start_ms in loaded["interval_starts_ms"]]
    statuses = {cell["start"]: cell["status"] for cell in cells if cell["start"] in ours}
    assert statuses == dict(zip(ours, ["loaded", "loaded", "loaded", "failed"])), cells
    assert _iso(loaded["failed_start_ms"]) == ours[-1]
    assert all(cell["href"].startswith(f"/dags/{DAG_ID}/runs/") for cell in cells)
    assert "not-the-password" not in text and "s3cret" not in text  # no secret on the page


def test_a_user_who_may_not_read_the_dag_and_an_anonymous_request_get_no_pipeline_data(
    loaded: dict[str, Any], api_server: str
) -> None:
    viewer, outsider = _token(api_server, "viewer"), _token(api_server, "outsider")
    stream = loaded["stream"]

    status, body = _get(f"{api_server}{API}", viewer)  # the check that can fail: the viewer does see it
    assert status == 200 and stream in body

    for url in (f"{api_server}{API}", f"{api_server}{PAGE}", f"{api_server}/kinesis-doris/dags/{DAG_ID}"):
        for token in (outsider, None):
            status, body = _get(url, token)
            assert status in (401, 403), (url, status, body[:300])
            assert stream not in body and loaded["table"] not in body
    for token in (outsider, None):
        status, body = _get(f"{api_server}/kinesis-doris/api/pipelines", token)
        assert (status, stream in body) in ((200, False), (401, False), (403, False)), (status, body[:300])
        if token is outsider:
            assert status == 200 and json.loads(body) == []
