# Headroom planner image: built with the same scripts CI uses, run on debian:12-slim.
# The headroom-worker image (GPU nodes) is Dockerfile.worker.

FROM debian:12 AS build
WORKDIR /src
# Dependencies first, so this layer is reused while only sources change.
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# Exactly what CI (scripts/test.sh) runs; tests/deploy/check_dockerfiles.py checks it.
RUN --mount=type=cache,target=/root/.cache/ccache scripts/build-release.sh

FROM debian:12-slim
# Runtime halves of the -dev packages the binaries link against.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 \
      libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libcpp-httplib0.11 \
      libsqlite3-0 libpq5 libonnx1 libsimdjson14 libyaml-cpp0.7 \
 && rm -rf /var/lib/apt/lists/*
# A numeric USER lets Kubernetes' runAsNonRoot verify it without a runAsUser.
RUN groupadd --system --gid 10001 headroom \
 && useradd --system --uid 10001 --gid headroom --home-dir /var/lib/headroom \
      --create-home --shell /usr/sbin/nologin headroom
# headroom-worker too, for a simulated worker beside the planner (deploy/compose.yaml);
# GPU nodes run Dockerfile.worker's image.
COPY --from=build /src/build/server/headroom-planner /src/build/client/headroom \
     /src/build/worker/headroom-worker /usr/local/bin/
# The planner reads models/ and data/ relative to its working directory.
WORKDIR /opt/headroom
COPY models/ models/
COPY data/ data/
USER 10001:10001
VOLUME /var/lib/headroom
EXPOSE 50051 9464
# Every flag can be set as HEADROOM_<FLAG>; the command line wins. Kubernetes and
# compose set HEADROOM_DB (a PostgreSQL URL from a Secret) instead of the SQLite file.
# The planner listens on the network, so it serves TLS with the certificate and key
# mounted at /etc/headroom/tls (a Kubernetes TLS Secret's layout: tls.crt, tls.key,
# ca.crt) and bearer tokens from /etc/headroom/tokens/tokens (NAME ROLE SHA256HEX).
# Started without them it exits 2 naming the file it cannot read; see
# deploy/README.md for how to mount them. HEADROOM_TLS_CA is not a planner flag: it
# is the CA the headroom CLI (the HEALTHCHECK, docker exec) verifies the planner by.
# For mTLS set HEADROOM_TLS_CLIENT_CA=/etc/headroom/tls/ca.crt.
ENV HEADROOM_LISTEN=0.0.0.0:50051 \
    HEADROOM_HTTP_LISTEN=0.0.0.0:9464 \
    HEADROOM_DB=/var/lib/headroom/headroom.db \
    HEADROOM_TLS_CERT=/etc/headroom/tls/tls.crt \
    HEADROOM_TLS_KEY=/etc/headroom/tls/tls.key \
    HEADROOM_TOKENS_FILE=/etc/headroom/tokens/tokens \
    HEADROOM_TLS_CA=/etc/headroom/tls/ca.crt
# Health over TLS, verified against ca.crt (the planner's certificate needs the SAN
# IP:127.0.0.1, as scripts/dev-certs.sh and deploy/k8s-examples/cert-manager.yaml
# give it). The CLI would take HEADROOM_TLS_CERT/KEY, the planner's own pair, as a
# client certificate: blank them, or give a client pair in HEADROOM_HEALTHCHECK_CERT
# and HEADROOM_HEALTHCHECK_KEY when the planner requires one (HEADROOM_TLS_CLIENT_CA).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD HEADROOM_TLS_CERT="${HEADROOM_HEALTHCHECK_CERT-}" \
      HEADROOM_TLS_KEY="${HEADROOM_HEALTHCHECK_KEY-}" \
      headroom health --server 127.0.0.1:50051 || exit 1
ENTRYPOINT ["headroom-planner"]
