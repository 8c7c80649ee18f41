set -u
ROOT=$PWD
export LD_LIBRARY_PATH=$ROOT/.deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
unpack() {  # unpack NAME DIR
  [[ -f .gpubin/pack/$1.tar.xz ]] || return 0
  if [[ ! -x $2/moex || $(cat $2/PACK_COMMIT 2>/dev/null) != $(tar -xJOf .gpubin/pack/$1.tar.xz ./PACK_COMMIT) ]]; then
    rm -rf $2; mkdir -p $2; tar -C $2 -xJf .gpubin/pack/$1.tar.xz
  fi
  echo "$1 = $(cat $2/PACK_COMMIT)"
}
B=/tmp/moexbin V0=/tmp/moexv0 SM=/tmp/moexsm
unpack new $B; unpack before $V0; unpack smem $SM
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader; date -u
