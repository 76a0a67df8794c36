//! `desi-gpu-map plan`: the preview table.

use crate::args::PlanArgs;
use crate::json;
use desi_gpu_map_core::launch::{launcher_named, Launcher};
use desi_gpu_map_core::method::Method;
use desi_gpu_map_core::method::Visible;
use desi_gpu_map_core::names::{names, parse_name, Named};
use desi_gpu_map_core::preview::{
    even_split, loads, place, preview, Limit, Load, PlanError, Row, DEFAULT_GPUS,
};
use desi_gpu_map_core::slurm::gpus::parse_gpu_list;
use desi_gpu_map_core::text::quote;
use desi_gpu_map_core::topology::{Preset, Topology};
use serde::Serialize;
use std::fmt::Write;

pub fn run(args: &PlanArgs) -> Result<String, Box<dyn std::error::Error>> {
    let (method, visible) = (args.method, args.visible);
    let per_node = tasks_per_node(args)?;
    let topology = topology(args)?;
    let gpus = gpu_lists(args, topology.as_ref())?;
    if visible == Visible::Rotate {
        // Each task's row lists its node's every GPU.
        let listed = per_node.iter().zip(&gpus).fold(0usize, |all, (&n, g)| {
            all.saturating_add(n.saturating_mul(g.len()))
        });
        Limit::Listed.check(listed, || {
            format!(
                "--visible rotate lists {listed} GPUs (every task's row lists its node's GPUs),"
            )
        })?;
    }
    if let (Method::Closest, Some(t)) = (method, &topology) {
        // The plugin says this once per node; the preview says it on stderr.
        for (node, list) in gpus.iter().enumerate() {
            if let Err(why) = desi_gpu_map_core::topology::near_cpus(list, t) {
                let line = format!("desi-gpu-map plan: node {node}: {why}\n");
                let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            }
        }
    }
    let ranks = place(&per_node, args.distribution);
    let mut rows = preview(&ranks, &gpus, method, visible, topology.as_ref())?;
    if args.mps {
        shares(&mut rows)?;
    }
    let loads = loads(&rows, &gpus);
    let launcher = match &args.launcher {
        Some(name) => Some(launcher_named(name).map_err(|valid| {
            format!("invalid --launcher {}; valid values: {valid}", quote(name))
        })?),
        None => None,
    };
    if args.json {
        Ok(to_json(method, visible, args.mps, launcher, &rows, &loads)?)
    } else {
        let text = to_text(method, visible, &rows, &loads);
        Ok(match launcher {
            Some(l) => format!("{}\n{text}", launcher_line(l)),
            None => text,
        })
    }
}

/// What `--launcher` adds above the table: where each rank's place comes
/// from, and its GPUs.
fn launcher_line(l: &Launcher) -> String {
    format!(
        "launcher {} ({}): rank's local/count from {} of {}; GPUs from the daemon step's list, \
         the inherited list (--devices), or every GPU of the node",
        l.name, l.title, l.local_rank, l.local_size
    )
}

/// `--mps`: each task's even share of its GPU, refusing more clients per
/// GPU than MPS serves, as the plugin does (a `closest` step is counted
/// as contiguous places it, as there).
fn shares(rows: &mut [Row]) -> Result<(), PlanError> {
    for row in rows.iter_mut() {
        if row.clients > desi_gpu_map_core::mps::MAX_CLIENTS {
            return Err(PlanError::TooManyClients {
                node: row.node,
                gpu: row.gpu(),
                tasks: row.clients,
            });
        }
        row.share = Some(desi_gpu_map_core::mps::even_share(row.clients));
    }
    Ok(())
}

/// The largest topology file read; a larger one is refused, not cut.
const MAX_TOPOLOGY_BYTES: u64 = 1 << 20;

/// `--topology`: a preset's name, or a file in the format of
/// [`desi_gpu_map_core::topology`]. `closest` needs one.
fn topology(args: &PlanArgs) -> Result<Option<Topology>, Box<dyn std::error::Error>> {
    let Some(given) = &args.topology else {
        if args.method == Method::Closest {
            return Err(format!(
                "--method closest needs --topology PRESET|FILE (presets: {})",
                names::<Preset>().join(", ")
            )
            .into());
        }
        return Ok(None);
    };
    if let Ok(preset) = parse_name::<Preset>(given) {
        return Ok(Some(preset.topology()));
    }
    let text = read_topology(given)?;
    let topology = Topology::parse(&text)
        .map_err(|e| format!("--topology {}: {e}", desi_gpu_map_core::text::quote(given)))?;
    Ok(Some(topology))
}

/// The text of topology file `given`: at most [`MAX_TOPOLOGY_BYTES`] of
/// UTF-8. Every failure names the file.
fn read_topology(given: &str) -> Result<String, String> {
    let shown = desi_gpu_map_core::text::quote(given);
    let fail = |why: String| format!("--topology {shown}: {why}");
    let file = std::fs::File::open(given).map_err(|e| {
        fail(format!(
            "{e}; give a file or a preset ({})",
            names::<Preset>().join(", ")
        ))
    })?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(fail("is a directory, not a topology file".to_string()));
    }
    // One byte past the bound tells a file over it from one at it.
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(&file, MAX_TOPOLOGY_BYTES + 1),
        &mut bytes,
    )
    .map_err(|e| fail(format!("cannot read it: {e}")))?;
    if u64::try_from(bytes.len()).unwrap_or(u64::MAX) > MAX_TOPOLOGY_BYTES {
        // A regular file's size; a device or a pipe tells none.
        let size = file
            .metadata()
            .ok()
            .map(|m| m.len())
            .filter(|&n| n > MAX_TOPOLOGY_BYTES)
            .map_or_else(String::new, |n| format!("{n} bytes, "));
        return Err(fail(format!(
            "{size}over the limit of {MAX_TOPOLOGY_BYTES} bytes for a topology file"
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        fail(format!(
            "not UTF-8 text (the first bad byte is at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// One value per node, or one value for every node.
fn per_node<T: Clone>(values: &[T], nodes: usize, what: &'static str) -> Result<Vec<T>, PlanError> {
    match values {
        [one] => Ok(vec![one.clone(); nodes]),
        many if many.len() == nodes => Ok(many.to_vec()),
        many => Err(PlanError::ValuesPerNode {
            option: what,
            values: many.len(),
            nodes,
        }),
    }
}

fn tasks_per_node(args: &PlanArgs) -> Result<Vec<usize>, PlanError> {
    let nodes = args.nodes;
    if nodes == 0 {
        return Err(PlanError::NoNodes);
    }
    // Before anything is allocated per node.
    Limit::Nodes.check(nodes, || format!("--nodes {nodes} is"))?;
    let counts = match (args.ntasks, args.ntasks_per_node.as_slice()) {
        (Some(n), _) => {
            Limit::Tasks.check(n, || format!("--ntasks {n} is"))?;
            let counts = even_split(n, nodes)?;
            // The first node takes the most.
            let most = counts.first().copied().unwrap_or(0);
            Limit::NodeTasks.check(most, || {
                format!("--ntasks {n} puts {most} tasks on node 0,")
            })?;
            counts
        }
        (None, []) => vec![1; nodes],
        (None, given) => {
            for &k in given {
                Limit::NodeTasks.check(k, || format!("--ntasks-per-node {k} is"))?;
            }
            let counts = per_node(given, nodes, "--ntasks-per-node")?;
            let total = sum(&counts);
            Limit::Tasks.check(total, || {
                sum_said("--ntasks-per-node", given, nodes, total, "tasks")
            })?;
            counts
        }
    };
    if counts.contains(&0) {
        return Err(PlanError::NodeWithoutTasks);
    }
    Ok(counts)
}

/// Each node's GPU list: `--devices`, else `--gpus` counts, else the
/// topology's GPUs, else [`DEFAULT_GPUS`]; at most [`Limit::Gpus`] in all,
/// counted before a list is made.
fn gpu_lists(args: &PlanArgs, topology: Option<&Topology>) -> Result<Vec<Vec<String>>, PlanError> {
    let nodes = args.nodes;
    if !args.devices.is_empty() {
        // Each list is at most MAX_LIST_ENTRIES long (parse_gpu_list).
        let lists = args
            .devices
            .iter()
            .map(|d| parse_gpu_list(d))
            .collect::<Result<Vec<_>, _>>()?;
        let lens: Vec<usize> = lists.iter().map(Vec::len).collect();
        let total = sum(&per_node(&lens, nodes, "--devices")?);
        let shown: Vec<String> = args
            .devices
            .iter()
            .map(|d| desi_gpu_map_core::text::quote(d))
            .collect();
        Limit::Gpus.check(total, || {
            sum_said("--devices", &shown, nodes, total, "GPUs")
        })?;
        return per_node(&lists, nodes, "--devices");
    }
    if let (Some(t), []) = (topology, args.gpus.as_slice()) {
        let total = t.gpus.len().saturating_mul(nodes);
        Limit::Gpus.check(total, || {
            let given = args.topology.as_deref().unwrap_or_default();
            let given = desi_gpu_map_core::text::quote(given);
            sum_said("--topology", &[given], nodes, total, "GPUs")
        })?;
        return Ok(vec![t.tokens(); nodes]);
    }
    let counts = match args.gpus.as_slice() {
        [] => vec![DEFAULT_GPUS; nodes],
        given => {
            for &k in given {
                Limit::NodeGpus.check(k, || format!("--gpus {k} is"))?;
            }
            per_node(given, nodes, "--gpus")?
        }
    };
    if counts.contains(&0) {
        return Err(PlanError::NodeWithoutGpus);
    }
    let total = sum(&counts);
    Limit::Gpus.check(total, || match args.gpus.as_slice() {
        [] => format!(
            "--gpus {DEFAULT_GPUS} on {nodes} nodes is {total} GPUs ({DEFAULT_GPUS} a node is \
             the default),"
        ),
        given => sum_said("--gpus", given, nodes, total, "GPUs"),
    })?;
    Ok(counts
        .iter()
        .map(|&k| (0..k).map(|i| i.to_string()).collect())
        .collect())
}

/// The sum of sizes, saturating (a sum past every limit stays past it).
fn sum(sizes: &[usize]) -> usize {
    sizes.iter().fold(0, |all, &k| all.saturating_add(k))
}

/// How per-node `values` of `option` came to `total` `unit`, for a message.
fn sum_said<T: std::fmt::Display>(
    option: &str,
    values: &[T],
    nodes: usize,
    total: usize,
    unit: &str,
) -> String {
    match values {
        [one] => format!("{option} {one} on {nodes} nodes is {total} {unit},"),
        _ => format!("{option}, one value for each of {nodes} nodes, is {total} {unit},"),
    }
}

fn to_text(method: Method, visible: Visible, rows: &[Row], loads: &[Load]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "method {} visible {}", method.name(), visible.name());
    let mps = rows.iter().any(|r| r.share.is_some());
    let share_head = if mps { " share" } else { "" };
    // As wide as the longest GPU name: UUIDs (26.05's env_uuid) stay aligned.
    let w = rows.iter().map(|r| r.gpu().len()).max().unwrap_or(0).max(8);
    let _ = writeln!(
        out,
        "{:>6} {:>5} {:>9} {:>w$}{share_head}  visible",
        "rank", "node", "local", "gpu"
    );
    for r in rows {
        let local = format!("{}/{}", r.local_id, r.local_count);
        let cpus = r
            .cpus
            .as_ref()
            .map_or(String::new(), |c| format!("  cpus {c}"));
        let share = r.share.map_or(String::new(), |s| format!(" {s:>5}"));
        let _ = writeln!(
            out,
            "{:>6} {:>5} {:>9} {:>w$}{share}  {}{cpus}",
            r.rank,
            r.node,
            local,
            r.gpu(),
            r.visible
        );
    }
    let _ = writeln!(out, "\nload per GPU");
    let _ = writeln!(out, "{:>5} {:>w$} {:>6}", "node", "gpu", "tasks");
    for Load { node, gpu, tasks } in loads {
        let _ = writeln!(out, "{node:>5} {gpu:>w$} {tasks:>6}");
    }
    out
}

/// The preview as `plan --json` prints it.
#[derive(Serialize)]
struct PreviewJson<'a> {
    method: &'a str,
    visible: &'a str,
    /// Present (true) only under `--mps`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    mps: bool,
    /// Present only under `--launcher`.
    #[serde(skip_serializing_if = "Option::is_none")]
    launcher: Option<LauncherReport>,
    #[serde(with = "rows")]
    tasks: &'a [Row],
    #[serde(with = "loads_json")]
    load: &'a [Load],
}

/// One task of the preview in `plan --json` (the core's `Row`).
#[derive(Serialize)]
struct RowJson<'a> {
    rank: usize,
    node: usize,
    local_id: usize,
    local_count: usize,
    /// The task's GPUs as one list (`0`, or `0,1` for a share).
    gpu: String,
    /// The same, one entry each.
    gpus: &'a [String],
    visible: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpus: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    share: Option<u32>,
}

/// One GPU's load in `plan --json` (the core's `Load`).
#[derive(Serialize)]
struct LoadJson<'a> {
    node: usize,
    gpu: &'a str,
    tasks: usize,
}

mod rows {
    use super::{Row, RowJson};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(rows: &&[Row], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(rows.iter().map(|r| RowJson {
            rank: r.rank,
            node: r.node,
            local_id: r.local_id,
            local_count: r.local_count,
            gpu: r.gpu(),
            gpus: &r.gpus,
            visible: &r.visible,
            cpus: r.cpus.as_deref(),
            share: r.share,
        }))
    }
}

mod loads_json {
    use super::{Load, LoadJson};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(loads: &&[Load], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(loads.iter().map(|l| LoadJson {
            node: l.node,
            gpu: &l.gpu,
            tasks: l.tasks,
        }))
    }
}

/// The launcher under `--launcher`, and the variables its ranks read.
#[derive(Serialize)]
struct LauncherReport {
    name: &'static str,
    local_rank: &'static str,
    local_size: &'static str,
}

fn to_json(
    method: Method,
    visible: Visible,
    mps: bool,
    launcher: Option<&Launcher>,
    rows: &[Row],
    loads: &[Load],
) -> Result<String, serde_json::Error> {
    json::line(&PreviewJson {
        method: method.name(),
        visible: visible.name(),
        mps,
        launcher: launcher.map(|l| LauncherReport {
            name: l.name,
            local_rank: l.local_rank.name(),
            local_size: l.local_size.name(),
        }),
        tasks: rows,
        load: loads,
    })
}
