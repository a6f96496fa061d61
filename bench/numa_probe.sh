#!/usr/bin/env bash
# Does where the loop thread runs explain the spread of the busy-loop rounds?
# The host's CPUs by NUMA node, the GPU's node, then throughput_probe.py and
# lone_cost.py unpinned, pinned (taskset) to each node in turn, and to the
# first and the last four CPUs.
#   bash bench/numa_probe.sh [rounds]
set -uo pipefail
rounds=${1:-4}
bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | tr 'A-F' 'a-f' | sed 's/^0000//')
gpu_node=$(cat /sys/bus/pci/devices/0000${bus#0000}/numa_node 2>/dev/null || echo "?")
echo "GPU ${bus}: NUMA node ${gpu_node}"
lscpu | grep -i -E "^(NUMA|Thread|Core|Socket|Model name)"
nodes=$(lscpu -p=NODE | grep -v '^#' | sort -u)
configs=("all:")
for n in $nodes; do
  cpus=$(lscpu -p=CPU,NODE | grep -v '^#' | awk -F, -v n="$n" '$2==n{print $1}' | paste -sd,)
  configs+=("node$n:$cpus")
done
n_cpu=$(nproc --all)
configs+=("low4:0-3" "high4:$((n_cpu - 4))-$((n_cpu - 1))")  # four CPUs at either end (one node or not)
for c in "${configs[@]}"; do
  name=${c%%:*}; cpus=${c#*:}
  pin=(); [[ -n $cpus ]] && pin=(taskset -c "$cpus")
  echo "=== $name ${cpus:+(cpus $cpus)}"
  timeout 60 "${pin[@]}" python3 bench/throughput_probe.py --loop asyncio --rounds "$rounds" --seconds 0.4 --spins ""
  timeout 60 "${pin[@]}" python3 bench/lone_cost.py --rounds 3 --loop asyncio --only bound_loop,minimal,cudafd
done
