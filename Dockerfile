# syntax=docker/dockerfile:1
# One image for the operator (manager, webhook) and the node agents (toolkit, validate):
#   docker build -t ghcr.io/gpuctrl/gpuctrl:0.1.0 .
# The build stage makes wheels of gpuctrl and its dependencies; the final stage installs only
# those wheels (no compiler, no pip left behind) and runs as the unprivileged user 65532.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuctrl ./gpuctrl
COPY api ./api
COPY controllers ./controllers
COPY webhooks ./webhooks
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels gpuctrl \
    && pip uninstall --yes pip setuptools wheel \
    && useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin gpuctrl
# The operator runs unprivileged; the node agents' DaemonSets set their own securityContext.
USER 65532:65532
ENTRYPOINT ["gpuctrl"]
CMD ["--help"]
