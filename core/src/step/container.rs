//! A container plugin beside this one in the task's `task_init`. pyxis
//! (NVIDIA's SPANK plugin for enroot) copies its container's environment
//! into each task, overwriting, then moves the task into the container's
//! namespaces (`slurm_spank_task_init` in pyxis's `pyxis_slurmstepd.c`).
//! SPANK calls plugins in plugstack order, so which runs first decides:
//!
//! - run after it (the packaged snippet's name, `env::SNIPPET`), it finds an
//!   image's GPU list in place of Slurm's, and binds from Slurm's over it;
//!   a step's MPS pipe directory counts only where the container sees it;
//! - run before it, the plugin cannot see what the image will set: it binds,
//!   but withholds its flag, since the binding may not survive, and says so.

use super::map::StepMap;
use crate::env;
use crate::mps::{Mps, NoMps};
use crate::text::quote;

/// Where a container plugin stands to one task. Only the plugin's front end
/// finds one; `exec` and the task prolog run inside whatever container the
/// task is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Container<'a> {
    /// None beside this plugin.
    #[default]
    None,
    /// A plugin that ran before this one moved the task into another mount
    /// namespace (pyxis joins its container's): the task's lists are what
    /// that plugin left, and `pipe_seen` says whether the step's MPS pipe
    /// directory is in the task's view.
    Entered {
        /// The step's MPS pipe directory is in the task's view.
        pipe_seen: bool,
    },
    /// `plugin`, a container plugin, runs after this one and may replace
    /// the task's lists, in a step that runs in its container.
    After {
        /// The plugin's name.
        plugin: &'a str,
    },
}

/// The first container plugin among the SPANK plugins loaded `after` this
/// one (plugstack.conf's order). Whether a step uses it cannot be known
/// here: its option's value reaches only its own callback, and its
/// environment form is not in the tasks' environment under srun.
pub fn container_plugin_after(after: &[String]) -> Option<&'static str> {
    after
        .iter()
        .find_map(|name| env::CONTAINER_PLUGINS.iter().find(|p| *p == name))
        .copied()
}

impl Container<'_> {
    /// Whether the task's list may be a container's, not Slurm's.
    pub(crate) fn entered(&self) -> bool {
        matches!(self, Container::Entered { .. })
    }

    /// Whether the flag must be withheld: the binding may not survive.
    pub(crate) fn withholds_flag(&self) -> bool {
        matches!(self, Container::After { .. })
    }

    /// The step's MPS as this task can use it: a daemon whose pipe directory
    /// the container does not see serves no task inside it.
    pub(crate) fn mps(&self, mps: &Mps) -> Mps {
        match (self, mps) {
            (Container::Entered { pipe_seen: false }, Mps::Serving(d)) => Mps::Without {
                why: NoMps::NotInContainer {
                    pipe: d.pipe(),
                    base: d.base.clone(),
                },
                loud: true,
            },
            _ => mps.clone(),
        }
    }

    /// What local task 0 says of the container, once per node: `cuda` is
    /// the task's `CUDA_VISIBLE_DEVICES` as this plugin found it.
    pub(crate) fn line(&self, map: &StepMap, cuda: Option<&str>) -> Option<String> {
        let why = match self {
            Container::None => return None,
            Container::Entered { .. } => {
                if map.listed.step_cuda() == cuda {
                    return None;
                }
                format!(
                    "the container's environment set {} to {} (a SPANK plugin that runs \
                     before desi-gpu-map, such as pyxis, copies it into each task); binding \
                     each task from Slurm's list over it",
                    env::CUDA,
                    cuda.map_or_else(|| "nothing".to_string(), quote)
                )
            }
            Container::After { plugin } => format!(
                "{plugin} runs after desi-gpu-map (plugstack.conf's order): in a step in its \
                 container it copies the container's environment into each task, which may \
                 replace this binding, so tasks are bound but not flagged {}; load \
                 desi-gpu-map after {plugin} (the packaged snippet's name, {}, sorts after \
                 {plugin}.conf)",
                map.flag,
                env::SNIPPET
            ),
        };
        Some(why)
    }
}

#[cfg(test)]
mod tests {
    use super::{container_plugin_after, Container};
    use crate::env;
    use crate::step::testing::*;
    use crate::step::*;

    fn in_container<'a>(mut t: TaskInputs<'a>, container: Container<'a>) -> TaskInputs<'a> {
        t.container = container;
        t
    }

    const ENTERED: Container<'static> = Container::Entered { pipe_seen: true };

    #[test]
    fn an_images_list_after_a_container_plugin_is_bound_over_and_said_once() {
        let map = mapped(plan(&SLURM_4));
        let first = map_task(&map, &in_container(task(0, 4, Some("all")), ENTERED));
        assert_eq!(get(&first, env::CUDA), Some("0"));
        assert_eq!(get(&first, env::DEFAULT_FLAG), Some("1"));
        assert_eq!(first.say.len(), 1, "{:?}", first.say);
        assert!(
            first.say[0]
                .contains("the container's environment set CUDA_VISIBLE_DEVICES to \"all\"")
                && first.say[0].contains("binding each task from Slurm's list over it"),
            "{:?}",
            first.say
        );
        let third = map_task(&map, &in_container(task(2, 4, Some("all")), ENTERED));
        assert_eq!(get(&third, env::CUDA), Some("2"));
        assert!(third.say.is_empty(), "said once per node: {:?}", third.say);
    }

    #[test]
    fn a_container_that_left_slurms_list_says_nothing() {
        let map = mapped(plan(&SLURM_4));
        let out = map_task(&map, &in_container(task(0, 4, Some("0,1,2,3")), ENTERED));
        assert_eq!(get(&out, env::CUDA), Some("0"));
        assert!(out.say.is_empty(), "{:?}", out.say);
    }

    #[test]
    fn slurms_own_binding_inside_a_container_is_still_kept() {
        let map = mapped(plan(&SLURM_4));
        let mut t = in_container(task(0, 4, Some("1")), ENTERED);
        t.tres_bind = Some("gres/gpu:per_task:1");
        let out = map_task(&map, &t);
        assert!(out.set.is_empty(), "{:?}", out.set);
    }

    #[test]
    fn a_container_plugin_after_this_one_withholds_the_flag_and_says_why() {
        let map = mapped(plan(&SLURM_4));
        let after = Container::After { plugin: "pyxis" };
        let out = map_task(&map, &in_container(task(0, 4, Some("0,1,2,3")), after));
        assert_eq!(get(&out, env::CUDA), Some("0"), "still bound");
        assert_eq!(get(&out, env::DEFAULT_FLAG), None, "but not flagged");
        assert!(
            out.unset.contains(&env::DEFAULT_FLAG.to_string()),
            "a stale flag goes"
        );
        assert_eq!(out.say.len(), 1);
        assert!(
            out.say[0].contains("pyxis runs after desi-gpu-map")
                && out.say[0].contains("not flagged DESI_GPU_MAPPED")
                && out.say[0].contains(env::SNIPPET),
            "{:?}",
            out.say
        );
        let second = map_task(&map, &in_container(task(1, 4, Some("0,1,2,3")), after));
        assert_eq!(get(&second, env::DEFAULT_FLAG), None);
        assert!(second.say.is_empty(), "said once per node");
    }

    #[test]
    fn a_container_plugin_counts_where_it_is_loaded_after_this_one() {
        let after = ["other".to_string(), "pyxis".to_string()];
        assert_eq!(container_plugin_after(&after), Some("pyxis"));
        assert_eq!(container_plugin_after(&after[..1]), None);
        assert_eq!(container_plugin_after(&[]), None);
    }

    #[test]
    fn outside_a_container_a_differing_list_is_still_slurms() {
        let map = mapped(plan(&SLURM_4));
        let out = map_task(&map, &task(0, 4, Some("all")));
        assert!(out.set.is_empty());
        assert!(out.say[0].contains("Slurm narrowed"), "{:?}", out.say);
    }
}
