# gpusched: the operator image (`gpusched run`). Small (python:3.11-slim), non-root, dependencies pinned in
# requirements.lock, numba kernels compiled at build time. See docs/operator.md.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements.lock ./
RUN python -m venv /opt/gpusched/venv \
 && /opt/gpusched/venv/bin/pip install --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY scheduler ./scheduler
RUN /opt/gpusched/venv/bin/pip install --no-deps . \
 && /opt/gpusched/venv/bin/python -m compileall -q /opt/gpusched/venv/lib
# Compile every kernel (serial and parallel twins) once. The pods copy this cache into their emptyDir
# (manifests/deployment.yaml: numba needs a writable cache directory), so a start does not spend 20-40 s in the
# compiler. numba keys its cache by CPU: on nodes whose CPU differs from the build machine's, kernels compile
# at first use instead.
RUN NUMBA_CACHE_DIR=/opt/gpusched/numba-cache \
    /opt/gpusched/venv/bin/gpusched bench kernels --nodes 64 --pods 2 --repeat 1 > /dev/null

FROM python:3.11-slim
COPY --from=build /opt/gpusched /opt/gpusched
ENV PATH=/opt/gpusched/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NUMBA_CACHE_DIR=/var/cache/numba
USER 10001:10001
EXPOSE 8080 8081
ENTRYPOINT ["gpusched"]
CMD ["run"]
