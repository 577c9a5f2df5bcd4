# One image for the operator (manager, webhook) and the node agents (toolkit, validate).
# Build: docker build -t gpuctrl:dev .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpuctrl ./gpuctrl
COPY api ./api
COPY controllers ./controllers
COPY webhooks ./webhooks
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels gpuctrl \
    && useradd --system --uid 65532 --no-create-home gpuctrl
# The operator runs unprivileged; the node agents' DaemonSets set their own securityContext.
USER 65532:65532
ENTRYPOINT ["gpuctrl"]
CMD ["--help"]
