//! A task that has ended, as its task epilog sees it: which step's MPS
//! keeper, if any, it tells ([`keeper_to_tell`]).

use super::facts::{in_step, node_id};
use crate::mps::{named_daemon, KeeperAddr};
use crate::settings::config::MpsSettings;
use crate::snapshot::Snapshot;
use crate::step::{parse_step_id, step_tag};

/// The keeper that the epilog of a task of an srun step tells that the
/// task ended, by its address (`uid`: the job's user; `settings`: the MPS
/// options, for the directory's base), built as the task's own was;
/// `None` where the task was no task of an srun step, or its step or node
/// cannot be read: then no keeper of its can run.
pub fn keeper_to_tell(uid: u32, settings: &MpsSettings, vars: &Snapshot) -> Option<KeeperAddr> {
    if !in_step(vars) {
        return None;
    }
    let step_id = parse_step_id(vars.step_id.as_deref()?)?;
    let tag = step_tag(vars, step_id)?;
    let node_id = node_id(vars)?;
    Some(KeeperAddr::of(&named_daemon(
        uid, &tag, node_id, settings, vars,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env;
    use crate::step::testing::FakeNode;
    use std::path::Path;

    fn node(pairs: &[(&str, &str)]) -> Snapshot {
        FakeNode::new(pairs, Ok(Vec::new())).vars()
    }

    #[test]
    fn an_epilog_tells_its_own_steps_keeper_on_its_node() {
        let n = node(&[
            (env::JOB_ID, "23"),
            (env::STEP_ID, "4"),
            (env::NODE_ID, "1"),
            (env::TMPDIR, "/local/job23"),
        ]);
        let d = keeper_to_tell(3901, &MpsSettings::default(), &n).unwrap();
        assert_eq!(d.name(), "dgm-mps.3901.23.4.1.k");
        assert_eq!(d.daemon().base, Path::new("/local/job23"));
        let site = MpsSettings {
            dir: Some("/var/mps".into()),
            ..MpsSettings::default()
        };
        assert_eq!(
            keeper_to_tell(3901, &site, &n).unwrap().daemon().base,
            Path::new("/var/mps")
        );
    }

    #[test]
    fn outside_an_srun_step_no_keeper_can_run() {
        let batch = node(&[
            (env::JOB_ID, "23"),
            (env::STEP_ID, "4294967294"),
            (env::NODE_ID, "0"),
        ]);
        assert_eq!(keeper_to_tell(3901, &MpsSettings::default(), &batch), None);
        let no_node = node(&[(env::JOB_ID, "23"), (env::STEP_ID, "4")]);
        assert_eq!(
            keeper_to_tell(3901, &MpsSettings::default(), &no_node),
            None
        );
        assert_eq!(
            keeper_to_tell(3901, &MpsSettings::default(), &node(&[])),
            None
        );
    }
}
