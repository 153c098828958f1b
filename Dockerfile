# One image for `hub`, `worker` and `migrate` (the command picks the role):
#   docker build -t realtime-dispatch .
#   docker run --rm -e REALTIME_DATABASE_URL=... realtime-dispatch migrate
# Multi-stage: the build stage installs the package into a virtualenv, the runtime stage copies
# only that virtualenv; no compiler, no pip cache, no embedded PostgreSQL (the `embedded` extra
# is `serve`'s, for development), and it runs as an unprivileged user.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /opt/realtime-dispatch \
    && /opt/realtime-dispatch/bin/pip install --upgrade pip \
    && /opt/realtime-dispatch/bin/pip install .

FROM python:3.11-slim-bookworm
RUN groupadd --system --gid 10001 realtime \
    && useradd --system --uid 10001 --gid realtime --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin realtime
COPY --from=build /opt/realtime-dispatch /opt/realtime-dispatch
ENV PATH=/opt/realtime-dispatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
# hub: 8000 (hub, REST, /metrics, /healthz, /readyz); worker: 9100 (/metrics, /healthz, /readyz).
EXPOSE 8000 9100
ENTRYPOINT ["realtime-dispatch"]
CMD ["hub", "--host", "0.0.0.0", "--port", "8000"]
