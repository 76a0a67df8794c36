//! Where a step's tasks sit, as Slurm tells each task: its node-local id
//! and the node's task count, read from the task's own environment
//! (`SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_STEP_TASKS_PER_NODE`). The
//! plugin asks SPANK instead; `desi-gpu-map exec` has only these.

/// Most nodes in a step a task count list may name, and `desi-gpu-map
/// plan` previews: well past any machine Slurm runs (the largest have tens
/// of thousands of nodes).
pub const MAX_NODES: usize = 1 << 20;

/// Most tasks of a step on one node: the ceiling Slurm puts on
/// `MaxTasksPerNode` (slurm.conf: default 512, "may not exceed 65533").
pub const MAX_TASKS_PER_NODE: usize = 65_533;

/// The task counts per node in Slurm's compressed form: `4(x2),3` is
/// 4, 4, 3. `None` where the text is not that form, or names over
/// [`MAX_NODES`] nodes.
pub(crate) fn tasks_per_node(text: &str) -> Option<Vec<usize>> {
    let mut counts = Vec::new();
    for part in text.trim().split(',') {
        let (count, times) = match part.split_once("(x") {
            Some((count, rest)) => (count, rest.strip_suffix(')')?.parse::<usize>().ok()?),
            None => (part, 1),
        };
        let count = count.parse::<usize>().ok()?;
        if times == 0 || counts.len().saturating_add(times) > MAX_NODES {
            return None;
        }
        counts.extend(std::iter::repeat(count).take(times));
    }
    Some(counts)
}

/// The number of tasks on node `node_id` of the step.
pub(crate) fn local_count(text: &str, node_id: usize) -> Option<usize> {
    tasks_per_node(text)?.get(node_id).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurms_compressed_counts() {
        assert_eq!(tasks_per_node("4(x2),3"), Some(vec![4, 4, 3]));
        assert_eq!(tasks_per_node("8"), Some(vec![8]));
        assert_eq!(tasks_per_node("2,1(x3)"), Some(vec![2, 1, 1, 1]));
        assert_eq!(local_count("4(x2),3", 2), Some(3));
        assert_eq!(local_count("4(x2),3", 3), None);
        for bad in [
            "",
            "x",
            "4(x)",
            "4(x2",
            "4(x0)",
            "-1",
            "4,,3",
            "4(x99999999)",
        ] {
            assert_eq!(tasks_per_node(bad), None, "{bad}");
        }
    }
}
