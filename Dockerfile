# gpusched: the operator image (`gpusched run`). Small (python:3.11-slim), non-root, dependencies pinned in
# requirements.lock (the runtime closure only: no dev, test or simulator extras), numba kernels compiled at build
# time. See docs/operator.md.

# The base image of both stages, one reference. Pin it by digest for a build you ship: a tag moves when Docker
# rebuilds it (Debian security updates), a digest does not. Read the current one where you build, and pass it:
#   docker buildx imagetools inspect python:3.11-slim      (the "Digest:" line, the multi-platform index)
#   make image PYTHON_IMAGE=python:3.11-slim@sha256:<that digest>
# The default is the tag because the digest cannot be read where this file is written (the project's machines
# reach no container registry) and a digest copied from elsewhere could not be checked; tests/test_dockerfile.py
# checks that both stages use this one reference and that a digest, when the default carries one, is well formed.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.lock ./
RUN python -m venv /opt/gpusched/venv \
 && /opt/gpusched/venv/bin/pip install --no-deps -r requirements.lock
# Every file pyproject.toml names: the readme and the licence (the package's metadata carries LICENSE).
COPY pyproject.toml README.md LICENSE ./
COPY scheduler ./scheduler
RUN /opt/gpusched/venv/bin/pip install --no-deps . \
 && /opt/gpusched/venv/bin/python -m compileall -q /opt/gpusched/venv/lib
# Compile every kernel once, into the image: the benchmark's (serial and parallel twins), then exactly what
# `gpusched run` compiles before it takes part (operator.warm_kernels with the default profile, the same call and
# argument types, so the same cache entries). The pods copy this cache into their emptyDir
# (manifests/deployment.yaml: numba needs a writable cache directory), so a start loads kernels in about half a
# second instead of spending 20-40 s in the compiler. numba keys its cache by CPU model; NUMBA_CPU_NAME=generic
# (here and at run time, below) makes the entries valid on any x86-64 node, at the price of the newest vector
# instructions. Build with --build-arg NUMBA_CPU_NAME=<llvm cpu name, e.g. sapphirerapids> for one node type.
ARG NUMBA_CPU_NAME=generic
ENV NUMBA_CPU_NAME=${NUMBA_CPU_NAME}
RUN NUMBA_CACHE_DIR=/opt/gpusched/numba-cache \
    /opt/gpusched/venv/bin/gpusched bench kernels --nodes 64 --pods 2 --repeat 1 > /dev/null \
 && NUMBA_CACHE_DIR=/opt/gpusched/numba-cache /opt/gpusched/venv/bin/python -c \
    "from scheduler.k8s import config, operator; assert operator.warm_kernels(config.load(None)) == 2"

FROM ${PYTHON_IMAGE}
ARG NUMBA_CPU_NAME=generic
COPY --from=build /opt/gpusched /opt/gpusched
ENV PATH=/opt/gpusched/venv/bin:$PATH \
    NUMBA_CPU_NAME=${NUMBA_CPU_NAME} \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NUMBA_CACHE_DIR=/var/cache/numba
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["gpusched"]
CMD ["run"]
