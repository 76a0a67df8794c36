//! Where srun places a step's tasks, and what each task then gets: the
//! preview behind `desi-gpu-map plan`, computed with the plugin's own
//! [`map_task`].

use crate::config::{Visible, DEFAULT_FLAG};
use crate::env;
use crate::error::Error;
use crate::gpus::join;
use crate::method::Method;
use crate::step::{map_task, StepMap, TaskInputs};
use crate::vendor::{Rendering, Vendor};

/// srun's `-m` task distribution over nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Consecutive ranks fill a node before the next (srun's default).
    Block,
    /// Rank `r` goes to the next node, in turn, that has room.
    Cyclic,
}

/// Splits `ntasks` over `nodes` as evenly as possible, the first nodes
/// taking one more: srun's split when every node offers the same CPUs
/// (whole nodes). On shared nodes srun follows the allocation instead; give
/// the real split with `--ntasks-per-node`.
pub fn even_split(ntasks: usize, nodes: usize) -> Result<Vec<usize>, Error> {
    if nodes == 0 {
        return Err(Error::new("at least one node is needed"));
    }
    if ntasks < nodes {
        return Err(Error::new(format!(
            "{ntasks} tasks cannot cover {nodes} nodes (srun needs at least one task per node)"
        )));
    }
    let (each, extra) = (ntasks / nodes, ntasks % nodes);
    Ok((0..nodes).map(|i| each + usize::from(i < extra)).collect())
}

/// The global ranks on each node, in local-id order.
pub fn place(per_node: &[usize], distribution: Distribution) -> Vec<Vec<usize>> {
    let total: usize = per_node.iter().sum();
    let mut ranks: Vec<Vec<usize>> = per_node.iter().map(|&n| Vec::with_capacity(n)).collect();
    match distribution {
        Distribution::Block => {
            let mut next = 0;
            for (node, &count) in ranks.iter_mut().zip(per_node) {
                node.extend(next..next + count);
                next += count;
            }
        }
        Distribution::Cyclic => {
            let mut rank = 0;
            while rank < total {
                for (node, &count) in ranks.iter_mut().zip(per_node) {
                    if node.len() < count && rank < total {
                        node.push(rank);
                        rank += 1;
                    }
                }
            }
        }
    }
    ranks
}

/// One task of a previewed step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub rank: usize,
    pub node: usize,
    pub local_id: usize,
    pub local_count: usize,
    /// The task's GPU: the first entry of `visible`.
    pub gpu: String,
    pub visible: String,
}

/// The whole step: each node's GPU list, and what each task gets from the
/// plugin, sorted by rank.
pub fn preview(
    ranks: &[Vec<usize>],
    gpus: &[Vec<String>],
    method: Method,
    visible: Visible,
) -> Result<Vec<Row>, Error> {
    if gpus.len() != ranks.len() {
        return Err(Error::new(format!(
            "{} GPU lists for {} nodes",
            gpus.len(),
            ranks.len()
        )));
    }
    let mut rows = Vec::new();
    for (node, (node_ranks, node_gpus)) in ranks.iter().zip(gpus).enumerate() {
        rows.extend(node_rows(node, node_ranks, node_gpus, method, visible)?);
    }
    rows.sort_by_key(|row| row.rank);
    Ok(rows)
}

fn node_rows(
    node: usize,
    ranks: &[usize],
    gpus: &[String],
    method: Method,
    visible: Visible,
) -> Result<Vec<Row>, Error> {
    let cuda = join(gpus);
    let map = StepMap {
        method,
        visible,
        verbose: false,
        flag: DEFAULT_FLAG.to_string(),
        gpus: gpus.to_vec(),
        cuda: Some(cuda.clone()),
        others: Vec::new(),
        notes: Vec::new(),
        // `plan` previews CUDA_VISIBLE_DEVICES, as on NVIDIA nodes.
        rendering: Rendering {
            vendor: Vendor::Nvidia,
            visible,
            pci_order: false,
        },
    };
    let name = format!("node{node}");
    let mut rows = Vec::with_capacity(ranks.len());
    for (local_id, &rank) in ranks.iter().enumerate() {
        let task = TaskInputs {
            node: &name,
            local_id,
            local_count: ranks.len(),
            rank: u32::try_from(rank).unwrap_or(u32::MAX),
            cuda: Some(&cuda),
            tres_bind: None,
        };
        let out = map_task(&map, &task);
        let shown = out
            .set
            .iter()
            .find(|(k, _)| k == env::CUDA)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| Error::new(out.say.join("; ")))?;
        rows.push(Row {
            rank,
            node,
            local_id,
            local_count: ranks.len(),
            gpu: shown.split(',').next().unwrap_or_default().to_string(),
            visible: shown,
        });
    }
    Ok(rows)
}

/// Tasks per GPU on each node: `(node, gpu, tasks)` in GPU-list order.
pub fn loads(rows: &[Row], gpus: &[Vec<String>]) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    for (node, node_gpus) in gpus.iter().enumerate() {
        for gpu in node_gpus {
            let tasks = rows
                .iter()
                .filter(|r| r.node == node && &r.gpu == gpu)
                .count();
            out.push((node, gpu.clone(), tasks));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: usize) -> Vec<String> {
        (0..n).map(|i| i.to_string()).collect()
    }

    #[test]
    fn even_split_like_srun() {
        assert_eq!(even_split(5, 2).unwrap(), [3, 2]);
        assert_eq!(even_split(8, 2).unwrap(), [4, 4]);
        assert_eq!(even_split(7, 3).unwrap(), [3, 2, 2]);
        assert!(even_split(1, 2).is_err());
        assert!(even_split(1, 0).is_err());
    }

    #[test]
    fn block_and_cyclic_placement() {
        assert_eq!(
            place(&[3, 2], Distribution::Block),
            [vec![0, 1, 2], vec![3, 4]]
        );
        assert_eq!(
            place(&[3, 2], Distribution::Cyclic),
            [vec![0, 2, 4], vec![1, 3]]
        );
        assert_eq!(
            place(&[1, 3], Distribution::Cyclic),
            [vec![0], vec![1, 2, 3]]
        );
    }

    #[test]
    fn preview_of_two_uneven_nodes() {
        let ranks = place(&[3, 2], Distribution::Cyclic);
        let g = [gpus(4), gpus(2)];
        let rows = preview(&ranks, &g, Method::Contiguous, Visible::Single).unwrap();
        let table: Vec<(usize, usize, usize, &str)> = rows
            .iter()
            .map(|r| (r.rank, r.node, r.local_id, r.gpu.as_str()))
            .collect();
        assert_eq!(
            table,
            [
                (0, 0, 0, "0"),
                (1, 1, 0, "0"),
                (2, 0, 1, "1"),
                (3, 1, 1, "1"),
                (4, 0, 2, "2")
            ]
        );
        let l = loads(&rows, &g);
        assert_eq!(l[3], (0, "3".to_string(), 0));
        assert_eq!(l[4], (1, "0".to_string(), 1));
    }

    #[test]
    fn preview_rotate_shows_the_whole_list() {
        let rows = preview(
            &[vec![0, 1]],
            &[gpus(2)],
            Method::RoundRobin,
            Visible::Rotate,
        )
        .unwrap();
        assert_eq!(rows[1].visible, "1,0");
        assert_eq!(rows[1].gpu, "1");
    }
}
