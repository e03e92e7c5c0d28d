# hoodied image: Python 3.11 slim + headless JRE 17 (Spark), the project installed from
# deploy/requirements.lock into /opt/hoodied, run as a non-root user.
# tests/deploy/test_deploy.py installs the same lock into a fresh venv and runs the entrypoint.

# ---- build: a venv with the pinned dependencies and the project (no compilers needed: wheels only)
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ONLY_BINARY=:all:
RUN python -m venv /opt/hoodied
COPY deploy/requirements.lock /src/deploy/requirements.lock
RUN /opt/hoodied/bin/pip install --no-cache-dir -r /src/deploy/requirements.lock
COPY pyproject.toml README.md /src/
COPY hoodie /src/hoodie
COPY planners /src/planners
COPY executors /src/executors
COPY service /src/service
# the project itself, without resolving anything beyond the lock
RUN /opt/hoodied/bin/pip install --no-cache-dir --no-deps /src
RUN find /opt/hoodied -name '__pycache__' -type d -prune -exec rm -rf {} + \
    && /opt/hoodied/bin/pip uninstall -y pip setuptools wheel

# ---- JRE 17 (headless use: Spark's driver and executors)
FROM eclipse-temurin:17-jre AS jre

# ---- final: runtime only
FROM python:3.11-slim-bookworm
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="hoodied" \
      org.opencontainers.image.description="Runs the table services of Apache Hudi tables: compaction, clustering, clean, indexing." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/hoodied/hoodied"
ENV JAVA_HOME=/opt/java/openjdk \
    PATH=/opt/hoodied/bin:/opt/java/openjdk/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TMPDIR=/tmp \
    HOME=/tmp
COPY --from=jre /opt/java/openjdk /opt/java/openjdk
COPY --from=build /opt/hoodied /opt/hoodied
RUN groupadd --system --gid 10001 hoodied \
    && useradd --system --uid 10001 --gid hoodied --no-create-home --home-dir /tmp --shell /usr/sbin/nologin hoodied \
    && rm -rf /root/.cache /var/cache/* /var/log/*
USER 10001:10001
WORKDIR /tmp
EXPOSE 9464
STOPSIGNAL SIGTERM
# exec form: hoodied is PID 1 and receives SIGTERM itself (it drains, then exits)
ENTRYPOINT ["/opt/hoodied/bin/hoodied"]
CMD ["run", "--config", "/etc/hoodied/hoodied.yaml"]
