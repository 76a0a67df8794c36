//! `desi-gpu-map show`: what this task got, read from its environment and,
//! where present, NVML (NVIDIA) or the kernel's render nodes (AMD, Intel).

use crate::args::ShowArgs;
use crate::json;
use desi_gpu_map_core::cpuset::CpuSet;
use desi_gpu_map_core::env;
use desi_gpu_map_core::names::Named;
use desi_gpu_map_core::runtime::{choose, Vendor};
use desi_gpu_map_core::settings::config::NvmlSource;
use desi_gpu_map_core::slurm::gpus::parse_gpu_list;
use desi_gpu_map_core::text::bare;
use desi_gpu_map_core::topology::{kernel_place, locate_token, sysfs_bus_id, GpuPlace};
use desi_gpu_map_host::files::HostFiles;
use desi_gpu_map_host::nvml::{devices_within, Device};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use std::fmt::Write;
use std::path::Path;

pub fn run(args: &ShowArgs) -> Result<String, Box<dyn std::error::Error>> {
    let var = |name: &str| std::env::var(name).ok();
    let vendor = choose(args.devices.vendor, &HostFiles, &args.root).vendor;
    let own = desi_gpu_map_host::sys::allowed_cpus(None);
    let facts = [
        ("node", var(env::NODE_NAME)),
        ("rank", var(env::RANK)),
        ("local_id", var(env::LOCAL_ID)),
        ("flag", var(&args.flag)),
        ("method", var(env::METHOD)),
        ("node_gpus", var(env::NODE_GPUS)),
        // Every GPU the task holds (its share where tasks are fewer than GPUs).
        ("task_gpus", var(env::TASK_GPUS)),
        ("vendor", Some(vendor.name().to_string())),
        ("cuda_visible_devices", var(env::CUDA)),
        ("rocr_visible_devices", var(env::ROCR)),
        ("ze_affinity_mask", var(env::ZE)),
        ("cpus", own.as_ref().map(ToString::to_string)),
        // MPS: the plugin's daemon serves the task (1), where, and its share.
        (MPS_FACT, var(env::MPS)),
        (PIPE_FACT, var(env::MPS_PIPE)),
        ("mps_active_thread_percentage", var(env::MPS_SHARE)),
    ];
    // A pipe directory gone (its step ended, or the variable was copied
    // elsewhere): no daemon serves the task there, whatever DESI_GPU_MAP_MPS
    // says.
    let pipe_missing = var(env::MPS_PIPE).is_some_and(|dir| !Path::new(&dir).is_dir());
    // The list that carries the task's GPU for this vendor.
    let carrier = vendor.carrier().name();
    let (shown, note) = match var(carrier).as_deref().map(parse_gpu_list) {
        None => (Vec::new(), None),
        Some(Err(e)) => (
            Vec::new(),
            Some(format!("{carrier} is not a valid GPU list: {e}")),
        ),
        Some(Ok(tokens)) if vendor.has_nvml() => {
            let timeout = std::time::Duration::from_secs(args.devices.nvml_timeout);
            through_nvml(
                &args.devices.nvml,
                timeout,
                &args.root,
                &tokens,
                own.as_ref(),
            )
        }
        Some(Ok(tokens)) => {
            let step = var(env::STEP_GPUS).and_then(|l| parse_gpu_list(&l).ok());
            let shown = tokens
                .iter()
                .map(|t| through_kernel(&args.root, vendor, t, step.as_deref(), own.as_ref()))
                .collect();
            (shown, None)
        }
    };
    let note = note.as_deref();
    if args.json {
        Ok(to_json(&args.flag, &facts, &shown, note, pipe_missing)?)
    } else {
        Ok(to_text(&args.flag, &facts, &shown, note, pipe_missing))
    }
}

/// One GPU of the task's list, as far as it was found.
#[derive(Default)]
struct Shown {
    token: String,
    uuid: Option<String>,
    pci_bus_id: Option<String>,
    /// Used and total, in bytes (NVML only).
    memory: Option<(u64, u64)>,
    near: Option<Place>,
    /// Why it was not found or located.
    missing: Option<String>,
}

/// Where a device sits: its NUMA node and local CPUs from sysfs, and
/// whether they overlap the task's CPUs.
struct Place {
    numa: Option<u32>,
    cpus: Option<CpuSet>,
    near: Option<bool>,
}

impl Place {
    fn of(place: GpuPlace, own: Option<&CpuSet>) -> Place {
        let near = match (own, &place.cpus) {
            (Some(own), Some(local)) => Some(own.overlap(local) > 0),
            _ => None,
        };
        Place {
            numa: place.numa,
            cpus: place.cpus,
            near,
        }
    }
}

/// NVIDIA: each token through NVML (by UUID, or by index in NVML's
/// order), its place from sysfs by NVML's bus id; and what NVML said.
/// NVML is asked in a child killed at `timeout`, as exec and the plugin
/// ask it ([`desi_gpu_map_host::deadline`]).
fn through_nvml(
    nvml: &NvmlSource,
    timeout: std::time::Duration,
    root: &Path,
    tokens: &[String],
    own: Option<&CpuSet>,
) -> (Vec<Shown>, Option<String>) {
    let found = match nvml {
        NvmlSource::Off => return (Vec::new(), None),
        _ if crate::handover::STATIC => return (Vec::new(), Some(crate::handover::to_dynamic())),
        _ => match devices_within(nvml, timeout) {
            Ok(found) => found,
            Err(e) => return (Vec::new(), Some(e.to_string())),
        },
    };
    let shown = tokens
        .iter()
        .map(|token| match find(&found, token) {
            Some(d) => Shown {
                token: token.clone(),
                uuid: Some(d.uuid.clone()),
                pci_bus_id: Some(d.pci_bus_id.clone()),
                memory: Some((d.memory_used, d.memory_total)),
                near: sysfs_bus_id(&d.pci_bus_id)
                    .and_then(|bus| kernel_place(&HostFiles, root, &bus, &bus).ok())
                    .map(|place| Place::of(place, own)),
                missing: None,
            },
            None => Shown {
                token: token.clone(),
                missing: Some("not found through NVML".to_string()),
                ..Shown::default()
            },
        })
        .collect();
    (shown, None)
}

/// AMD and Intel: the token located through the kernel's render nodes.
fn through_kernel(
    root: &Path,
    vendor: Vendor,
    token: &str,
    step: Option<&[String]>,
    own: Option<&CpuSet>,
) -> Shown {
    match locate_token(&HostFiles, root, vendor, token, step) {
        Ok((bus, place)) => Shown {
            token: token.to_string(),
            pci_bus_id: Some(bus),
            near: Some(Place::of(place, own)),
            ..Shown::default()
        },
        Err(why) => Shown {
            token: token.to_string(),
            missing: Some(format!("not located: {why}")),
            ..Shown::default()
        },
    }
}

/// The NVML device a token names: by UUID, or by index in NVML's order.
fn find<'a>(devices: &'a [Device], token: &str) -> Option<&'a Device> {
    match token.parse::<u32>() {
        Ok(index) => devices.iter().find(|d| d.index == index),
        Err(_) => devices.iter().find(|d| d.uuid == token),
    }
}

/// The facts that tell the task's MPS: whether the plugin's daemon serves
/// it, and where its pipe directory is.
const MPS_FACT: &str = "mps";
const PIPE_FACT: &str = "mps_pipe_directory";

const MIB: u64 = 1 << 20;

/// The report as text. Every value is escaped ([`bare`]): the environment
/// is the user's, and a value could move the terminal or pose as a line.
fn to_text(
    flag: &str,
    facts: &[(&str, Option<String>)],
    shown: &[Shown],
    note: Option<&str>,
    pipe_missing: bool,
) -> String {
    let mut out = String::new();
    let mapped = facts
        .iter()
        .any(|(k, v)| *k == "flag" && v.as_deref() == Some("1"));
    let _ = writeln!(
        out,
        "mapped by desi-gpu-map: {}",
        if mapped { "yes" } else { "no" }
    );
    for (key, value) in facts {
        let remark = match value {
            Some(_) if pipe_missing => pipe_remark(key),
            _ => "",
        };
        let key = if *key == "flag" { flag } else { key };
        let value = value.as_deref().map_or("(unset)".to_string(), bare);
        let _ = writeln!(out, "{}: {value}{remark}", bare(key));
    }
    for (i, s) in shown.iter().enumerate() {
        let token = bare(&s.token);
        if let Some(missing) = &s.missing {
            let _ = writeln!(out, "device {i}: {token} ({})", bare(missing));
            continue;
        }
        let mut line = format!("device {i}: {token}");
        if let Some(uuid) = &s.uuid {
            let _ = write!(line, " uuid {}", bare(uuid));
        }
        if let Some(bus) = &s.pci_bus_id {
            let _ = write!(line, " pci {}", bare(bus));
        }
        if let Some((used, total)) = s.memory {
            let _ = write!(
                line,
                " memory used {} MiB of {} MiB",
                used / MIB,
                total / MIB
            );
        }
        let _ = writeln!(out, "{line}");
        if let Some(n) = &s.near {
            let _ = writeln!(
                out,
                "device {i}: numa node {} local cpus {} near this task's cpus: {}",
                n.numa.map_or("-".to_string(), |n| n.to_string()),
                n.cpus.as_ref().map_or("-".to_string(), ToString::to_string),
                match n.near {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "unknown",
                }
            );
        }
    }
    if let Some(note) = note {
        let _ = writeln!(out, "nvml: {}", bare(note));
    }
    out
}

/// What the text form adds to the MPS fact `key`, set, where the pipe
/// directory does not exist.
fn pipe_remark(key: &str) -> &'static str {
    match key {
        MPS_FACT => " (but its pipe directory does not exist: no MPS daemon serves this task)",
        PIPE_FACT => " (does not exist)",
        _ => "",
    }
}

/// The report as `show --json` prints it: the facts in order, then whether
/// the MPS pipe directory is set but does not exist, the flag's name, the
/// devices and what NVML said.
struct ReportJson<'a> {
    flag: &'a str,
    facts: &'a [(&'a str, Option<String>)],
    pipe_missing: bool,
    devices: Vec<DeviceReport<'a>>,
    note: Option<&'a str>,
}

/// A device of the task's list: `uuid: null` where NVML did not find it.
#[derive(Serialize)]
struct DeviceReport<'a> {
    token: &'a str,
    uuid: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pci_bus_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_used: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    numa_node: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    local_cpus: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    near: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    missing: Option<&'a str>,
}

impl Serialize for ReportJson<'_> {
    fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        let mut map = out.serialize_map(None)?;
        for (key, value) in self.facts {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("mps_pipe_directory_missing", &self.pipe_missing)?;
        map.serialize_entry("flag_name", self.flag)?;
        map.serialize_entry("devices", &self.devices)?;
        map.serialize_entry("nvml_note", &self.note)?;
        map.end()
    }
}

fn to_json(
    flag: &str,
    facts: &[(&str, Option<String>)],
    shown: &[Shown],
    note: Option<&str>,
    pipe_missing: bool,
) -> Result<String, serde_json::Error> {
    let devices = shown
        .iter()
        .map(|s| DeviceReport {
            token: &s.token,
            uuid: s.uuid.as_deref(),
            pci_bus_id: s.pci_bus_id.as_deref(),
            memory_used: s.memory.map(|(used, _)| used),
            memory_total: s.memory.map(|(_, total)| total),
            numa_node: s.near.as_ref().and_then(|n| n.numa),
            local_cpus: s
                .near
                .as_ref()
                .and_then(|n| n.cpus.as_ref().map(ToString::to_string)),
            near: s.near.as_ref().and_then(|n| n.near),
            missing: s.missing.as_deref(),
        })
        .collect();
    json::line(&ReportJson {
        flag,
        facts,
        pipe_missing,
        devices,
        note,
    })
}
