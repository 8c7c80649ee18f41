#!/usr/bin/env bash
# Starts N processes of one command as an expert-parallel group on this host: RANK, WORLD_SIZE, LOCAL_RANK (= the GPU),
# MASTER_ADDR/MASTER_PORT and MOEX_NCCL_ID_FILE (a fresh file where rank 0 publishes the NCCL id), NVLink multicast off.
# Usage: scripts/ep_launch.sh N cmd [args...]   Output lines are prefixed "[rR]"; exits with the first nonzero status.
set -uo pipefail
N=${1:?usage: ep_launch.sh N cmd [args...]}
shift
(($# > 0)) || { echo "usage: ep_launch.sh N cmd [args...]" >&2; exit 2; }
# NVLS (NVLink SHARP multicast) can take a shared host's GPUs out of service: always off, whatever the caller set.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export WORLD_SIZE=$N MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=${MASTER_PORT:-$((29500 + $$ % 1000))}
ID_DIR=$(mktemp -d /tmp/moex-ep.XXXXXX)
export MOEX_NCCL_ID_FILE=$ID_DIR/nccl_id
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$ID_DIR"; }
trap cleanup INT TERM
for ((r = 0; r < N; ++r)); do
    RANK=$r LOCAL_RANK=$r "$@" > >(sed -u "s/^/[r$r] /") 2> >(sed -u "s/^/[r$r] /" >&2) &
    pids+=($!)
done
status=0
for p in "${pids[@]}"; do
    wait "$p"
    rc=$?
    if ((rc != 0 && status == 0)); then
        status=$rc
        for q in "${pids[@]}"; do kill "$q" 2>/dev/null; done  # a rank failed: the others would wait in NCCL forever
    fi
done
rm -rf "$ID_DIR"
exit $status
