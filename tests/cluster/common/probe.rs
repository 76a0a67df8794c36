//! What each task prints, one script per kind of row, in one place. `T`
//! rows start with the rank ([`super::Ran::rows`] sorts by it); `V` rows
//! are sorted whole ([`super::Ran::lines`]).

/// `T rank node local CUDA_VISIBLE_DEVICES flag`.
pub const GPU: &str = r#"echo "T $SLURM_PROCID $(hostname) $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset}""#;

/// `T rank node local CUDA_VISIBLE_DEVICES flag method gpus`.
pub const FULL: &str = r#"echo "T $SLURM_PROCID $(hostname) $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAPPED-unset} ${DESI_GPU_MAP_METHOD-unset} ${DESI_GPU_MAP_NODE_GPUS-unset}""#;

/// `V local CUDA ROCR GDO ZE HIP CUDA_DEVICE_ORDER flag`: every vendor's list.
pub const VARS: &str = r#"echo "V $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${ROCR_VISIBLE_DEVICES-unset} ${GPU_DEVICE_ORDINAL-unset} ${ZE_AFFINITY_MASK-unset} ${HIP_VISIBLE_DEVICES-unset} ${CUDA_DEVICE_ORDER-unset} ${DESI_GPU_MAPPED-unset}""#;

/// `T rank local CUDA_VISIBLE_DEVICES its-CPUs`.
pub const CPUS: &str = r#"echo "T $SLURM_PROCID $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} $(sed -n 's/^Cpus_allowed_list:\t*//p' /proc/self/status)""#;

/// Under MPS, `T rank node local GPU mps-flag share answer dir`: `answer`
/// is its daemon's reply to `get_default_active_thread_percentage` through
/// the pipe it was given (`none`: no pipe), `dir` the mode and owner of the
/// step's MPS directory. Local task 0 also prints `D node uids GPUs` for
/// each control daemon serving that pipe. `control` is the control binary.
pub fn mps(control: &str) -> String {
    MPS.replace("CONTROL", control)
}

const MPS: &str = r#"
a=none m=none
if [ -n "${CUDA_MPS_PIPE_DIRECTORY-}" ]; then
  for i in $(seq 100); do
    a=$(echo get_default_active_thread_percentage | CONTROL 2>/dev/null) && [ -n "$a" ] && break
    a=failed; sleep 0.05
  done
  m=$(stat -c %a:%U "${CUDA_MPS_PIPE_DIRECTORY%/pipe}")
fi
echo "T $SLURM_PROCID $(hostname) $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES-unset} ${DESI_GPU_MAP_MPS-unset} ${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset} $a $m"
if [ "$SLURM_LOCALID" = 0 ] && [ -n "${CUDA_MPS_PIPE_DIRECTORY-}" ]; then
  for p in /proc/[0-9]*; do
    case "$(readlink $p/exe 2>/dev/null)" in */nvidia-cuda-mps-control) ;; *) continue ;; esac
    e=$(tr '\0' '\n' <$p/environ 2>/dev/null) || continue
    grep -qx "CUDA_MPS_PIPE_DIRECTORY=$CUDA_MPS_PIPE_DIRECTORY" <<<"$e" || continue
    echo "D $(hostname) $(awk '/^Uid:/ {print $2","$3","$4","$5}' $p/status) $(grep ^CUDA_VISIBLE_DEVICES= <<<"$e")"
  done
fi
"#;
