#!/usr/bin/env bash
# Session 22, call E: where the decode loop's warps stall (ring vs before), and the raster group 6 vs 16 again.
source .gpubin/s22/common.sh
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu | head -1)
M=""; for r in long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle lg_throttle barrier not_selected selected no_instruction branch_resolving dispatch_stall drain imc_miss membar sleeping tex_throttle misc; do M="$M,smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"; done
for v in new before; do bin=$B; [[ $v == before ]] && bin=$V0
  timeout 90 $NCU --metrics ${M#,},smsp__inst_executed.sum,smsp__cycles_active.avg,l1tex__t_sector_hit_rate.pct -k regex:batched_proj_kernel -c 1 $bin/moex bench --device cuda --shapes deepseek-v3 --tokens 1 --backends batched_mm --quant mxfp4 --reps 1 --warmup 0 > $OUT/ncu-stalls-$v.txt 2>&1; echo "$v rc $?"
done
paste <(grep -E "smsp__|l1tex" $OUT/ncu-stalls-new.txt | awk '{print $1, $NF}') <(grep -E "smsp__|l1tex" $OUT/ncu-stalls-before.txt | awk '{print $NF}') | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
date -u
for g in 6 16 6 16; do
  MOEX_SM90_GROUP_M=$g timeout 60 $B/moex bench --device cuda --shapes mixtral-8x7b,qwen3-30b-a3b,deepseek-v3 --tokens 4096,16384 --backends grouped_mm --case-seconds 0.15 2>&1 | grep -E "^(qwen|mixtral|deepseek)" | sed "s/^/g=$g /" >> $OUT/group.txt
done
cut -c1-100 $OUT/group.txt; date -u
