# Airflow with this provider and its Spark extra, for docker-compose.yaml (build context: the
# repository root; docker/airflow.Dockerfile.dockerignore keeps the context to the package).
# Versions are pinned by requirements/airflow3.txt, the lock the test suite runs against; the
# image's Python must match the lock's (3.11).
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_IMAGE}

# PySpark 4 runs on Java 17; local[N] Spark runs inside this container.
USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
USER airflow

COPY --chown=airflow:0 requirements/airflow3.txt /opt/kd/constraints.txt
COPY --chown=airflow:0 pyproject.toml README.md /opt/kd/src/
COPY --chown=airflow:0 airflow_provider_kinesis_doris /opt/kd/src/airflow_provider_kinesis_doris
# The demo's init and producer scripts use the scenario builders of the development stack.
COPY --chown=airflow:0 devstack /opt/kd/src/devstack
# Keeping apache-airflow in the same command stops pip from changing the image's Airflow.
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" "/opt/kd/src[spark]" /opt/kd/src/devstack \
        --constraint /opt/kd/constraints.txt
