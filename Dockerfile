# gpusched: the operator image (`gpusched run`). Small (python:3.11-slim), non-root, dependencies pinned in
# requirements.lock, numba kernels compiled at build time. See docs/operator.md.

FROM python:3.11-slim AS build
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

FROM python:3.11-slim
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
