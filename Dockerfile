# syntax=docker/dockerfile:1
# loadgen image: Locust master / worker with loadgen's plugin and its compiled halves (loadgen.protocol._wire, the
# wire reader; loadgen.measure._hist_walk, the exporter's histogram walk; loadgen.measure._hist_merge, the master's
# merge of the workers' histograms, which links zlib; loadgen.measure._record, a worker's recording of a finished
# request).
#   docker build -t REGISTRY/loadgen:0.1.0 . && docker push REGISTRY/loadgen:0.1.0
#   bash scripts/build-image        (podman, from a Debian bookworm base made with mmdebstrap: no registry pulled)
# Portable: the C half is built with the flags pyproject.toml gives (-O2 -Wall), never -march=native, so the image
# runs on any x86-64 (or arm64, built there) node whatever the CPU of the build host.

# The base of both stages: a Debian (bookworm) image with `python3` (>= 3.11, with venv) and apt, e.g. the official
# python:3.11-slim-bookworm (the default), or Debian's own python3 + python3-venv (no `python` binary, no C headers:
# the build stage adds python3-dev when Python.h is missing).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev zlib1g-dev \
    && if ! python3 -c 'import os, sys, sysconfig; \
            sys.exit(not os.path.exists(sysconfig.get_path("include") + "/Python.h"))'; then \
        apt-get install -y --no-install-recommends python3-dev; \
    fi \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 CFLAGS="-O2"
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# The dependencies first, in a layer of their own (a change to loadgen/ or README.md rebuilds only the layers below),
# at the versions the test suite runs: requirements/test-constraints.txt, the lock (universal: any Python >= 3.11,
# any architecture). otel: a scenario's `tracing.otlp_endpoint` exports spans to the cluster's collector.
COPY pyproject.toml requirements/test-constraints.txt ./
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
        x = p['optional-dependencies']; deps = p['dependencies'] + x['k8s'] + x['otel']; \
        print(*(d for d in deps if not d.startswith(p['name'])), sep='\n')" > /tmp/requirements.txt \
    && pip install -c test-constraints.txt -r /tmp/requirements.txt
COPY README.md ./
COPY loadgen ./loadgen
# Non-editable install into the venv (bytecode compiled now: the root filesystem is read-only at run time); pip check:
# the layer above brought everything the package declares. The extensions are optional in pyproject.toml, so prove
# they were built (-I: the venv's copy, not ./loadgen).
RUN pip install --no-deps "./[k8s,otel]" \
    && pip check \
    && python -I -c "import loadgen.protocol._wire, loadgen.measure._hist_walk, loadgen.measure._hist_merge, loadgen.measure._record"

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="loadgen" \
      org.opencontainers.image.description="Distributed Locust-based load generation for LLM inference deployments" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 loadgen \
    && useradd --system --uid 10001 --gid loadgen --home-dir /reports --no-create-home --shell /usr/sbin/nologin loadgen
COPY --from=build /opt/venv /opt/venv
# LOCUST_LOCUSTFILE: a bare `locust --master` / `--worker` in this image runs loadgen's locustfile.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    LOCUST_LOCUSTFILE=/opt/loadgen/locustfile.py
# One fixed path to the installed package's locustfile, whatever the Python (its site-packages path names the
# version): the chart's `locustfile` value, the k8s/ manifests and LOCUST_LOCUSTFILE use it.
RUN mkdir /opt/loadgen \
    && ln -s "$(loadgen locustfile)" /opt/loadgen/locustfile.py \
    && test -f /opt/loadgen/locustfile.py
WORKDIR /reports
USER 10001:10001
# 8089 web UI / --serve-reports, 5557 Locust master ZMQ, 9646 Prometheus metrics.
EXPOSE 8089 5557 9646
ENTRYPOINT ["loadgen"]
CMD ["--help"]
