//! Slurm's own GPU binding requests, as srun passes them to the nodes.
//!
//! `--gpu-bind=X` and `--tres-bind=gres/gpu:X` reach slurmstepd as one
//! string, `SLURMD_TRES_BIND` in the task (and `SLURM_GPU_BIND` in the step,
//! the user's value as typed). Its grammar, from Slurm's
//! `src/common/tres_bind.c` (`tres_bind_verify_cmdline`) and srun(1):
//!
//! ```text
//! value := spec ("+" spec)*
//! spec  := ["gres/"] NAME ":" bind          (22.05 and 23.02 write "gpu:",
//!                                           23.11 and later "gres/gpu:")
//! bind  := ["verbose,"] ( "closest" | "none" | "single:" N | "per_task:" N
//!                       | "map_gpu:" LIST | "map:" LIST
//!                       | "mask_gpu:" LIST | "mask:" LIST )
//! ```
//!
//! Keywords are compared without regard to case, as Slurm does. Only `none`
//! leaves the GPUs unbound; any other GPU binding is Slurm's to keep.

use crate::text::quote;

/// What a binding string asks of the GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GpuBind {
    /// No GPU binding at all: no `gpu` entry, or `none`.
    Unbound,
    /// Slurm binds GPUs per task; the text says how, for messages.
    PerTask(String),
}

/// Reads `SLURMD_TRES_BIND` (`gres/gpu:none`, `gpu:verbose,single:1`,
/// `gres/gpu:map:0,1+gres/nic:closest`) or `SLURM_GPU_BIND` (`none`,
/// `verbose,map_gpu:0,1`). A value that cannot be read counts as a binding:
/// standing aside is the safe side.
pub(crate) fn parse_gpu_bind(value: &str) -> GpuBind {
    let per_task = || GpuBind::PerTask(quote(value));
    let value = value.trim();
    if value.is_empty() {
        return GpuBind::Unbound;
    }
    let mut found = None;
    for spec in value.split('+') {
        match gpu_spec(spec) {
            Spec::Gpu(bind) => found = Some(bind),
            Spec::Other => {}
            Spec::Unreadable => return per_task(),
        }
    }
    match found {
        None => GpuBind::Unbound,
        Some(bind) if is_none(bind) => GpuBind::Unbound,
        Some(_) => per_task(),
    }
}

enum Spec<'a> {
    /// The binding part of a `gpu` spec.
    Gpu(&'a str),
    /// Another GRES (`nic`, `shard`): not ours to read.
    Other,
    Unreadable,
}

/// Splits one spec. A bare binding (`none`, `verbose,single:1`), as
/// `SLURM_GPU_BIND` holds it, is a GPU binding.
fn gpu_spec(spec: &str) -> Spec<'_> {
    let spec = spec.trim();
    if is_bind(spec) {
        return Spec::Gpu(spec);
    }
    let Some((name, bind)) = spec.split_once(':') else {
        return Spec::Unreadable;
    };
    let name = strip_prefix_ci(name, "gres/").unwrap_or(name);
    match name {
        n if n.eq_ignore_ascii_case("gpu") => Spec::Gpu(bind),
        "" => Spec::Unreadable,
        _ => Spec::Other,
    }
}

/// True when `text` starts with one of the binding keywords.
fn is_bind(text: &str) -> bool {
    const KEYWORDS: [&str; 9] = [
        "verbose,",
        "closest",
        "none",
        "single:",
        "per_task:",
        "map_gpu:",
        "map:",
        "mask_gpu:",
        "mask:",
    ];
    KEYWORDS.iter().any(|k| strip_prefix_ci(text, k).is_some())
}

/// `none` or `verbose,none`: Slurm accepts anything starting with it.
fn is_none(bind: &str) -> bool {
    let bind = strip_prefix_ci(bind, "verbose,").unwrap_or(bind);
    strip_prefix_ci(bind, "none").is_some()
}

fn strip_prefix_ci<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| text.get(prefix.len()..))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unbound(value: &str) {
        assert_eq!(parse_gpu_bind(value), GpuBind::Unbound, "{value:?}");
    }

    fn bound(value: &str) {
        assert!(
            matches!(parse_gpu_bind(value), GpuBind::PerTask(_)),
            "{value:?}"
        );
    }

    /// `srun --gpu-bind=none`: 22.05.8 and 23.02 write `gpu:none`
    /// (measured on 22.05.8; `slurm_opt.c` of 23.02); 23.11.11, 24.11.5,
    /// 25.05.8, 25.11.7 and 26.05.3 write `gres/gpu:none` (measured).
    #[test]
    fn gpu_bind_none_in_every_series() {
        unbound("gpu:none");
        unbound("gpu:verbose,none");
        unbound("gres/gpu:none");
        unbound("gres/gpu:verbose,none");
        unbound("gres/gpu:NONE");
        unbound("GRES/GPU:None");
        // SLURM_GPU_BIND holds the user's value as typed.
        unbound("none");
        unbound("verbose,none");
        unbound("");
    }

    /// The per-task bindings srun(1) documents for `--gpu-bind` and
    /// `--tres-bind`, in the form of each series.
    #[test]
    fn per_task_bindings_in_every_series() {
        for bind in [
            "closest",
            "single:1",
            "per_task:1",
            "map_gpu:0,1",
            "mask_gpu:0x1,0x2",
            "map:0,1",
            "mask:0x3",
            "verbose,single:2",
            "verbose,closest",
        ] {
            bound(bind);
            bound(&format!("gpu:{bind}"));
            bound(&format!("gres/gpu:{bind}"));
        }
        // --gpus-per-task implies per_task:N.
        bound("gres/gpu:per_task:2");
    }

    #[test]
    fn several_gres_joined_with_plus() {
        bound("gres/gpu:map:0,1+gres/nic:closest");
        bound("gres/nic:closest+gres/gpu:single:1");
        unbound("gres/gpu:none+gres/nic:closest");
        // No GPU entry: nothing binds the GPUs.
        unbound("gres/nic:closest");
        unbound("gres/shard:per_task:1");
    }

    #[test]
    fn unreadable_values_count_as_bindings() {
        for odd in [
            "gpu",
            "garbage",
            ":none",
            "gres/:none",
            "+",
            "nonsense+gpu:none",
        ] {
            match parse_gpu_bind(odd) {
                GpuBind::PerTask(why) => assert!(why.starts_with('"'), "{why}"),
                other => panic!("{odd:?}: {other:?}"),
            }
        }
        let long = "x".repeat(10_000);
        match parse_gpu_bind(&long) {
            GpuBind::PerTask(why) => assert!(why.len() < 80),
            other => panic!("{other:?}"),
        }
    }
}
