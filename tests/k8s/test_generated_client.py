"""kubernetes_asyncio loaded name by name (scheduler.k8s.generated_client): what gpusched does not use is not
imported, and every name the packages offer is still there, as the same object an eager import gives.

Each test runs a fresh interpreter: this one has imported kubernetes_asyncio already (the fake API server does).
"""

from __future__ import annotations

import json
import subprocess
import sys


def fresh_interpreter(code: str) -> dict[str, object]:
    """Run ``code`` in a new interpreter; its last line of output, read as JSON."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_operator_imports_neither_the_dashboard_nor_the_generated_client_it_does_not_call() -> None:
    code = (
        "import json, sys\n"
        "from scheduler import cli\n"
        "cli.build_parser('run')\n"
        "from scheduler.k8s import run, client\n"
        "models = [m for m in sys.modules if m.startswith('kubernetes_asyncio.client.models.')]\n"
        "apis = sorted(m.rpartition('.')[2] for m in sys.modules if m.startswith('kubernetes_asyncio.client.api.'))\n"
        "board = sorted(m for m in sys.modules if m in ('scheduler.k8s.serve.dashboard', 'scheduler.dashboard.server',"
        " 'scheduler.dashboard.pages', 'scheduler.dashboard.cluster_map'))\n"
        "print(json.dumps({'models': len(models), 'apis': apis, 'board': board}))\n"
    )
    loaded = fresh_interpreter(code)
    assert loaded["board"] == []
    models = loaded["models"]
    assert isinstance(models, int) and models <= 2  # of some 700: kopf's look at V1ObjectMeta and V1OwnerReference
    # Of the 70 generated API classes, at most those gpusched calls (the operator's six, explain's and the
    # dashboard access's three).
    apis = loaded["apis"]
    assert isinstance(apis, list) and len(apis) <= 9, apis


def test_every_name_is_still_there_and_the_same_as_an_eager_import_gives() -> None:
    code = (
        "import json\n"
        "import scheduler.k8s\n"
        "import kubernetes_asyncio\n"
        "from kubernetes_asyncio import client, config\n"
        "from kubernetes_asyncio.client import CoreV1Api, V1Pod, rest\n"
        "from kubernetes_asyncio.client.api import core_v1_api\n"
        "from kubernetes_asyncio.client.models.v1_pod import V1Pod as Pod\n"
        "api = object.__new__(client.ApiClient)  # its (de)serialisation, without a session\n"
        "class Answer:\n"
        "    data = json.dumps({'metadata': {'name': 'p'}, 'spec': {'containers': [{'name': 'c'}]}})\n"
        "pod = api.deserialize(Answer(), 'V1Pod')\n"
        "body = api.sanitize_for_serialization(client.V1Binding(metadata=client.V1ObjectMeta(name='p'),"
        " target=client.V1ObjectReference(kind='Node', name='n')))\n"
        "print(json.dumps({\n"
        "    'same': V1Pod is Pod and CoreV1Api is core_v1_api.CoreV1Api and client.models.V1Pod is Pod,\n"
        "    'pod': [type(pod).__name__, pod.metadata.name, pod.spec.containers[0].name],\n"
        "    'rest': rest.__name__,\n"
        "    'body': body,\n"
        "    'names': len(client.__all__),\n"
        "    'version': kubernetes_asyncio.__version__,\n"
        "    'loader': callable(config.load_kube_config),\n"
        "}))\n"
    )
    found = fresh_interpreter(code)
    assert found["same"] is True
    assert found["pod"] == ["V1Pod", "p", "c"]
    assert found["rest"] == "kubernetes_asyncio.client.rest"
    assert found["body"] == {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n"}}
    names = found["names"]
    assert isinstance(names, int) and names > 700  # __all__: the whole __init__ ran when asked for it
    assert found["version"]
    assert found["loader"] is True
