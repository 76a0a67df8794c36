//! Whether MPS serves a mapped step on this node, and why: the plugin's
//! own daemon, another's that already serves it, or none.

use super::client::{even_share, tasks_per_gpu};
use super::control::{control, find_server, server_path};
use super::daemon::Daemon;
use super::dirs::{base_dir, check_base, check_socket, dir_name};
use super::input::{MpsFacts, MpsInput, MpsNode};
use super::no_mps::{NoMps, Whose, MAX_CLIENTS};
use super::serving::{InheritedMps, Mps, MPS_NAMES};
use crate::env;
use crate::files::hostname;
use crate::runtime::Vendor;
use crate::settings::config::{MpsMode, MpsShare};
use crate::slurm::gpus::is_uuid;
use crate::text::quote;
use crate::topology::nvml_uuids;
use std::path::Path;

/// What the step inherited: the plugin's own variables count as a parent
/// task's only where its flag is set, and its daemon as this node's only
/// where the host matches and the socket is there (a base such as a
/// shared `TMPDIR` may show another node's).
pub(crate) fn inherited(node: &MpsNode) -> InheritedMps {
    let vars = node.vars;
    let pipe = vars.mps_pipe.clone();
    let ours = pipe.is_some() && vars.mps.is_some();
    // The host is read only for a daemon of ours: most tasks have none.
    let here = ours
        && hostname(node.files).is_some_and(|host| vars.mps_host.as_ref() == Some(&host))
        && pipe
            .as_ref()
            .is_some_and(|p| node.files.exists(&Path::new(p).join("control")));
    let present = MPS_NAMES
        .into_iter()
        .filter(|&var| vars.value(var).is_some())
        .collect();
    InheritedMps {
        pipe,
        ours,
        here,
        present,
    }
}

/// Decides MPS for a mapped step that `inherited` what it did. The node is
/// asked for NVML's UUIDs only where MPS will run and Slurm's list names
/// GPUs by index.
pub(crate) fn decide(input: &MpsInput, inherited: &InheritedMps, node: &MpsNode) -> Mps {
    let tasks = input.facts.as_ref().map_or(0, |f| f.local_tasks);
    let mode = input.settings.mode;
    let auto = mode == MpsMode::Auto && tasks > input.gpus.len();
    if !input.asked && !auto {
        // A task that keeps a daemon's pipe names its GPU by UUID.
        return match &inherited.pipe {
            Some(pipe) if (!inherited.ours || inherited.here) && input.vendor == Vendor::Nvidia => {
                theirs(input, inherited, node, pipe, false)
            }
            _ => Mps::Off,
        };
    }
    if input.asked && mode == MpsMode::Off {
        return Mps::Without {
            why: NoMps::SiteOff,
            loud: true,
        };
    }
    match serve(input, inherited, node) {
        Ok(mps) => mps,
        Err(why) => Mps::Without {
            why,
            loud: input.asked,
        },
    }
}

/// The daemon at `pipe` serves the step: its tasks' GPUs by UUID.
fn theirs(
    input: &MpsInput,
    inherited: &InheritedMps,
    node: &MpsNode,
    pipe: &str,
    loud: bool,
) -> Mps {
    let mut why = format!(
        "the MPS daemon at {}={} serves this {}; no MPS daemon started",
        env::MPS_PIPE,
        quote(pipe),
        input.whose.noun()
    );
    let gpus = match uuids(input, node) {
        Ok(gpus) => Some(gpus),
        Err(e) => {
            why += &format!("; its tasks keep {} indices: {e}", input.whose.indices());
            None
        }
    };
    Mps::Theirs {
        why,
        loud,
        gpus,
        ours: inherited.here,
    }
}

/// MPS where it is asked for (or `mps=auto` wants it): another's that
/// serves already, else a daemon of the step's own; or why none.
fn serve(input: &MpsInput, inherited: &InheritedMps, node: &MpsNode) -> Result<Mps, NoMps> {
    let facts = input.facts.as_ref().ok_or(NoMps::NotSlurmstepd)?;
    if input.vendor != Vendor::Nvidia {
        return Err(NoMps::NotNvidia(input.vendor));
    }
    if let Some(served) = served_already(input, inherited, node) {
        return Ok(served);
    }
    let daemon = daemon(input, facts, inherited, node)?;
    check_socket(&daemon, facts.kept)?;
    check_base(&daemon.base, facts.uid, input.whose, node)?;
    Ok(Mps::Start(Box::new(Daemon {
        gpus: uuids(input, node)?,
        ..daemon
    })))
}

/// Another's MPS that serves the step already: Slurm's `gres/mps`, or the
/// parent's daemon where it runs (a nested step on another node gets its
/// own).
fn served_already(input: &MpsInput, inherited: &InheritedMps, node: &MpsNode) -> Option<Mps> {
    // A nested step inherits its parent task's share: the plugin's, not
    // Slurm's or the user's.
    if let Some(share) = node.vars.mps_share.as_deref().filter(|_| !inherited.ours) {
        let why = match input.whose {
            Whose::Step => format!(
                "Slurm's gres/mps serves this step ({}={}); no MPS daemon started",
                env::MPS_SHARE,
                quote(share)
            ),
            // The job came with the variable: from the broker's Slurm step
            // (gres/mps), or the user's.
            Whose::Granted(grant) => format!(
                "{}={} came with the {}: an MPS daemon serves it already; no MPS daemon \
                 started",
                env::MPS_SHARE,
                quote(share),
                grant.noun
            ),
        };
        return Some(Mps::Theirs {
            why,
            loud: input.asked,
            gpus: None,
            ours: false,
        });
    }
    let pipe = inherited
        .pipe
        .as_ref()
        .filter(|_| !inherited.ours || inherited.here)?;
    Some(theirs(input, inherited, node, pipe, input.asked))
}

/// The daemon the step would start (its GPUs not yet named by UUID), or
/// why none may start.
fn daemon(
    input: &MpsInput,
    facts: &MpsFacts,
    inherited: &InheritedMps,
    node: &MpsNode,
) -> Result<Daemon, NoMps> {
    let per_gpu = tasks_per_gpu(input.method, input.gpus.len(), facts.local_tasks);
    if let Some(most) = per_gpu.iter().copied().max().filter(|&m| m > MAX_CLIENTS) {
        return Err(NoMps::TooManyClients(most));
    }
    if facts.uid == 0 {
        return Err(NoMps::Root);
    }
    let control = control(input.settings, node)?;
    // A link's server is beside the file it names, not beside the link.
    let real = node
        .files
        .resolve(&control)
        .unwrap_or_else(|_| control.clone());
    let path = server_path(&control, &real);
    find_server(&path, node)?;
    let step = input.step.ok_or(NoMps::NoJobId)?;
    let share = |count: usize| match input.settings.share {
        MpsShare::Even => Some(even_share(count)),
        MpsShare::None => None,
    };
    let daemon = Daemon {
        control,
        path,
        base: base_dir(input.settings, node),
        stem: dir_name(
            facts.uid,
            facts.dir_step.as_deref().unwrap_or(step),
            facts.node_id,
        ),
        gpus: Vec::new(),
        uid: facts.uid,
        gid: facts.gid,
        host: hostname(node.files),
        shares: per_gpu.into_iter().map(share).collect(),
        keep_log: !inherited.ours && node.vars.mps_log.is_some(),
        timeout: input.timeout,
        local_tasks: facts.local_tasks,
        asked: input.asked,
        token: facts.token,
    };
    Ok(daemon)
}

/// The step's GPUs by UUID: NVML's list already is; Slurm's indices are
/// located through NVML by device minor (with `SLURM_STEP_GPUS` telling
/// absolute indices from renumbered ones).
fn uuids(input: &MpsInput, node: &MpsNode) -> Result<Vec<String>, NoMps> {
    if input.gpus.iter().all(|g| is_uuid(g)) {
        return Ok(input.gpus.to_vec());
    }
    let named = (node.places)()
        .map_err(|e| e.to_string())
        .and_then(|lines| match (input.whose, input.step_gpus) {
            // R's indices, which the plugin could not name through NVML:
            // nothing here tells them from renumbered ones either.
            (Whose::Granted(grant), None) => Err(grant.unlocated()),
            _ => nvml_uuids(&lines, input.gpus, input.step_gpus).map_err(|e| e.to_string()),
        });
    named.map_err(|why| NoMps::NoUuids {
        why,
        whose: input.whose,
    })
}
