#!/usr/bin/env bash
# Give the k3d agent nodes fake GPUs: 8 nvidia.com/gpu of capacity (an extended resource advertised through the
# node's status, as the Kubernetes docs on extended resources describe), the GPU feature-discovery labels, a
# clique and rack each, and the gpusched.io/gpu-topology annotation. The kubelet keeps an extended resource it
# did not set, and copies it to allocatable.
set -euo pipefail
GPUS="${GPUS:-8}"
TOPOLOGY='{"version":1,"gpus":['
for i in $(seq 0 $((GPUS - 1))); do
  peers=""
  for j in $(seq 0 $((GPUS - 1))); do [ "$i" = "$j" ] || peers+="\"$j\":12,"; done
  TOPOLOGY+="{\"index\":$i,\"numa\":0,\"pcie\":\"pcie0\",\"nvlink\":{${peers%,}}},"
done
TOPOLOGY="${TOPOLOGY%,}]}"

n=0
for node in $(kubectl get nodes -l '!node-role.kubernetes.io/control-plane' -o name); do
  kubectl patch "$node" --subresource=status --type=json \
    -p "[{\"op\":\"add\",\"path\":\"/status/capacity/nvidia.com~1gpu\",\"value\":\"$GPUS\"}]"
  kubectl label --overwrite "$node" \
    nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 nvidia.com/gpu.memory=81559 \
    nvidia.com/gpu.clique="fabric.$n" network.topology.gpusched.io/rack="r$n" network.topology.gpusched.io/block=b0
  kubectl annotate --overwrite "$node" "gpusched.io/gpu-topology=$TOPOLOGY"
  n=$((n + 1))
done
kubectl get nodes -o custom-columns='NAME:.metadata.name,GPUS:.status.allocatable.nvidia\.com/gpu,CLIQUE:.metadata.labels.nvidia\.com/gpu\.clique'
