# abcd-server images. Exact commands and options: deploy/README.md.
#
#   docker build -t abcd:0.1.0-cpu .                                   # CPU: Debian 12
#   docker build -t abcd:0.1.0-cuda --build-arg VARIANT=cuda .         # CUDA 12.6, Ubuntu 24.04
#   docker run --rm --stop-timeout 45 -p 50051:50051 -p 8080:8080 abcd:0.1.0-cpu
#
# Both variants build the same code with the README's script (deploy/scripts/setup.sh build),
# only the targets they ship (TARGETS, no test suites), and run it as uid 1000 with the bundled
# models. The cuda variant's builder has nvcc and so also builds the CUDA backend plugin (the
# server's backend factory depends on it), but the image does not ship it yet (engine/CUDA.md:
# not yet run on a GPU), so both variants serve on the CPU engine (`--device auto` falls back).
# No `# syntax=` directive: the engine's built-in Dockerfile frontend builds it, so an offline
# build needs only the base images (and the distribution's package mirror).
#
# The ENTRYPOINT makes abcd-server write its bound ports to /tmp/abcd-ports.json; the
# HEALTHCHECK reads the gRPC port from there, so it follows --grpc_port or --config.
#
# Checked offline by tests/deploy (ctest -R deploy): stages, pins, user, ports, health check,
# and the final stage's COPY layout run against a real build of abcd-server.

ARG VARIANT=cpu
ARG DEBIAN_VERSION=12.11
ARG CUDA_VERSION=12.6.3
ARG CUDA_UBUNTU=ubuntu24.04

# ---- builders -------------------------------------------------------------------------------
FROM debian:${DEBIAN_VERSION} AS build-cpu

# Ubuntu 24.04 is the CUDA base whose gRPC/protobuf/abseil match Debian 12's (1.51/3.21/20220623).
FROM nvidia/cuda:${CUDA_VERSION}-devel-${CUDA_UBUNTU} AS build-cuda
# GPU architectures the CUDA kernels are compiled for (CMake reads CUDAARCHS):
# A100 (80), A10/RTX 30 (86), L4/RTX 40 (89), H100 (90).
ENV CUDAARCHS="80;86;89;90"

FROM build-${VARIANT} AS build
# The CMake targets the runtime stage copies (abcd_sentencepiece is the tokenizer plugin,
# build/bin/libabcd_sentencepiece.so).
ARG TARGETS="abcd-server abcd-client abcd-cli abcd_sentencepiece"
WORKDIR /src
COPY . .
# setup.sh installs the build packages (libhiredis-dev among them) and builds TARGETS only,
# without the test suites. The runtime stage installs exactly the packages that own the
# libraries these binaries load (libhiredis with the Redis session store).
RUN TARGETS="${TARGETS}" BUILD_TESTS=OFF deploy/scripts/setup.sh build \
 && deploy/docker/runtime-packages.sh build/server/abcd-server build/server/abcd-client \
      build/server/abcd-cli build/bin/libabcd_sentencepiece.so > /runtime-packages.txt \
 && cat /runtime-packages.txt

# ---- runtimes -------------------------------------------------------------------------------
FROM debian:${DEBIAN_VERSION}-slim AS runtime-cpu

FROM nvidia/cuda:${CUDA_VERSION}-runtime-${CUDA_UBUNTU} AS runtime-cuda

FROM runtime-${VARIANT} AS runtime
ARG VARIANT
LABEL org.opencontainers.image.title="abcd" \
      org.opencontainers.image.description="abcd decoding server (gRPC :50051, HTTP/JSON + /metrics :8080)" \
      io.abcd.variant="${VARIANT}"

COPY --from=build /runtime-packages.txt /tmp/runtime-packages.txt
# uid/gid 1000 is "abcd" (Ubuntu images already have an "ubuntu" user with that id).
RUN apt-get update -qq \
 && xargs -a /tmp/runtime-packages.txt \
      env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && if getent passwd 1000 >/dev/null; then userdel "$(getent passwd 1000 | cut -d: -f1)"; fi \
 && if getent group 1000 >/dev/null; then groupdel "$(getent group 1000 | cut -d: -f1)"; fi \
 && groupadd --gid 1000 abcd \
 && useradd --uid 1000 --gid 1000 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin abcd

# The SentencePiece plugin must sit next to the binaries: the tokenizer dlopen()s it from there.
COPY --from=build /src/build/server/abcd-server /src/build/server/abcd-client \
     /src/build/server/abcd-cli /src/build/bin/libabcd_sentencepiece.so /opt/abcd/bin/
COPY --from=build /src/models/checkpoints/ /opt/abcd/models/

ENV PATH=/opt/abcd/bin:$PATH \
    ABCD_MODEL=/opt/abcd/models/abc-lm
USER 1000:1000
WORKDIR /opt/abcd
EXPOSE 50051 8080
# SIGTERM drains: in-flight requests get --drain_grace_seconds (30) to finish, so give
# `docker stop` more than that (docker run --stop-timeout 45, compose stop_grace_period).
STOPSIGNAL SIGTERM
# The health check asks grpc.health.v1 on 127.0.0.1 at the gRPC port the server wrote to the
# ENTRYPOINT's --port_file (written once serving): keep both if you replace the entrypoint.
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
  CMD ["/opt/abcd/bin/abcd-client", "health", "--port_file", "/tmp/abcd-ports.json", \
       "--timeout_seconds", "3"]
ENTRYPOINT ["/opt/abcd/bin/abcd-server", "--port_file", "/tmp/abcd-ports.json"]
# The model list; replace the command to serve others (see deploy/README.md).
CMD ["--models", "/opt/abcd/models/abc-lm,/opt/abcd/models/abc-en-de"]
