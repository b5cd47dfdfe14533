"""The only package that talks to Kubernetes (kopf, kubernetes_asyncio); each module's first lines say what it owns.

kubernetes_asyncio's generated client is loaded name by name as it is first used (``scheduler.k8s.generated_client``
says why); that is set up here, so that it is in place before any module of this package imports kubernetes_asyncio.
"""

from scheduler.k8s import generated_client

generated_client.install()
