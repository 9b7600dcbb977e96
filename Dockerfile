# Headroom planner image: built with the same scripts CI uses, run on debian:12-slim.
# The headroom-worker image (GPU nodes, CUDA runtime) comes with a later issue.

FROM debian:12 AS build
WORKDIR /src
# Dependencies first, so this layer is reused while only sources change.
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/root/.cache/ccache \
    scripts/build.sh -DHEADROOM_BUILD_TESTS=OFF -DHEADROOM_BUILD_BENCH=OFF \
      headroom-planner headroom

FROM debian:12-slim
# Runtime halves of the -dev packages the binaries link against.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623 \
      libspdlog1.10 libfmt9 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 \
      libcivetweb1 libsqlite3-0 libonnx1 \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --system --user-group --home-dir /var/lib/headroom --create-home \
      --shell /usr/sbin/nologin headroom
COPY --from=build /src/build/server/headroom-planner /src/build/client/headroom /usr/local/bin/
# The planner reads models/ and data/ relative to its working directory.
WORKDIR /opt/headroom
COPY models/ models/
COPY data/ data/
USER headroom
VOLUME /var/lib/headroom
EXPOSE 50051 9464
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["headroom", "health", "--server", "127.0.0.1:50051"]
ENTRYPOINT ["headroom-planner", "--listen=0.0.0.0:50051", "--http_listen=0.0.0.0:9464", \
            "--db=/var/lib/headroom/headroom.db"]
