//! `desi-gpu-map show`: what this task got, read from its environment and,
//! where present, NVML.

use crate::cli::ShowArgs;
use crate::json;
use desi_gpu_map::config::NvmlSource;
use desi_gpu_map::cpuset::CpuSet;
use desi_gpu_map::env;
use desi_gpu_map::gpus::parse_gpu_list;
use desi_gpu_map::nvml::{devices, Device};
use desi_gpu_map::topology::{kernel_place, sysfs_bus_id};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use std::fmt::Write;

pub fn run(args: &ShowArgs) -> Result<String, Box<dyn std::error::Error>> {
    let nvml = &args.nvml;
    let var = |name: &str| std::env::var(name).ok();
    let visible = var(env::CUDA);
    let tokens = visible.as_deref().map(parse_gpu_list);
    let found = match (nvml, &tokens) {
        (NvmlSource::Off, _) | (_, None) | (_, Some(Err(_))) => Ok(Vec::new()),
        _ => devices(nvml),
    };
    let facts = [
        ("node", var("SLURMD_NODENAME")),
        ("rank", var("SLURM_PROCID")),
        ("local_id", var("SLURM_LOCALID")),
        ("flag", var(&args.flag)),
        ("method", var(env::METHOD)),
        ("node_gpus", var(env::NODE_GPUS)),
        ("cuda_visible_devices", visible.clone()),
        ("cpus", own_cpus().map(|c| c.to_string())),
    ];
    let matched: Vec<(String, Option<&Device>)> = match (&tokens, &found) {
        (Some(Ok(list)), Ok(devs)) => list.iter().map(|t| (t.clone(), find(devs, t))).collect(),
        _ => Vec::new(),
    };
    let nvml_note = match (&tokens, &found) {
        (Some(Err(e)), _) => Some(format!("{} is not a valid GPU list: {e}", env::CUDA)),
        (_, Err(e)) => Some(e.to_string()),
        _ => None,
    };
    if args.json {
        Ok(to_json(&args.flag, &facts, &matched, nvml_note.as_deref())?)
    } else {
        Ok(to_text(&args.flag, &facts, &matched, nvml_note.as_deref()))
    }
}

/// This task's CPUs, as the kernel reports them (`Cpus_allowed_list`).
fn own_cpus() -> Option<CpuSet> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    CpuSet::parse_list(list.trim()).ok()
}

/// Where a device sits: its NUMA node and local CPUs from sysfs, and
/// whether they overlap the task's CPUs.
struct Near {
    numa: Option<u32>,
    cpus: Option<CpuSet>,
    near: Option<bool>,
}

fn near_of(device: &Device, own: Option<&CpuSet>) -> Option<Near> {
    let bus = sysfs_bus_id(&device.pci_bus_id)?;
    let place = kernel_place(std::path::Path::new("/"), &bus, &bus).ok()?;
    let near = match (own, &place.cpus) {
        (Some(own), Some(local)) => Some(own.overlap(local) > 0),
        _ => None,
    };
    Some(Near {
        numa: place.numa,
        cpus: place.cpus,
        near,
    })
}

/// The NVML device a token names: by UUID, or by index in NVML's order.
fn find<'a>(devices: &'a [Device], token: &str) -> Option<&'a Device> {
    match token.parse::<u32>() {
        Ok(index) => devices.iter().find(|d| d.index == index),
        Err(_) => devices.iter().find(|d| d.uuid == token),
    }
}

const MIB: u64 = 1 << 20;

fn to_text(
    flag: &str,
    facts: &[(&str, Option<String>)],
    matched: &[(String, Option<&Device>)],
    note: Option<&str>,
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
        let key = if *key == "flag" { flag } else { key };
        let _ = writeln!(out, "{key}: {}", value.as_deref().unwrap_or("(unset)"));
    }
    for (i, (token, device)) in matched.iter().enumerate() {
        match device {
            Some(d) => {
                let _ = writeln!(
                    out,
                    "device {i}: {token} uuid {} pci {} memory used {} MiB of {} MiB",
                    d.uuid,
                    d.pci_bus_id,
                    d.memory_used / MIB,
                    d.memory_total / MIB
                );
                if let Some(n) = near_of(d, own_cpus().as_ref()) {
                    let _ = writeln!(
                        out,
                        "device {i}: numa node {} local cpus {} near this task's cpus: {}",
                        n.numa.map_or("-".to_string(), |n| n.to_string()),
                        n.cpus.map_or("-".to_string(), |c| c.to_string()),
                        match n.near {
                            Some(true) => "yes",
                            Some(false) => "no",
                            None => "unknown",
                        }
                    );
                }
            }
            None => {
                let _ = writeln!(out, "device {i}: {token} (not found through NVML)");
            }
        }
    }
    if let Some(note) = note {
        let _ = writeln!(out, "nvml: {note}");
    }
    out
}

/// The report as `show --json` prints it: the facts in order, then the
/// flag's name, the devices and what NVML said.
struct Report<'a> {
    flag: &'a str,
    facts: &'a [(&'a str, Option<String>)],
    devices: Vec<DeviceReport<'a>>,
    note: Option<&'a str>,
}

/// A device of the task's list: found through NVML, or `uuid: null`.
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
}

impl Serialize for Report<'_> {
    fn serialize<S: Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        let mut map = out.serialize_map(None)?;
        for (key, value) in self.facts {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("flag_name", self.flag)?;
        map.serialize_entry("devices", &self.devices)?;
        map.serialize_entry("nvml_note", &self.note)?;
        map.end()
    }
}

fn to_json(
    flag: &str,
    facts: &[(&str, Option<String>)],
    matched: &[(String, Option<&Device>)],
    note: Option<&str>,
) -> Result<String, serde_json::Error> {
    let own = own_cpus();
    let devices = matched
        .iter()
        .map(|(token, device)| {
            let near = device.and_then(|d| near_of(d, own.as_ref()));
            DeviceReport {
                token,
                uuid: device.map(|d| d.uuid.as_str()),
                pci_bus_id: device.map(|d| d.pci_bus_id.as_str()),
                memory_used: device.map(|d| d.memory_used),
                memory_total: device.map(|d| d.memory_total),
                numa_node: near.as_ref().and_then(|n| n.numa),
                local_cpus: near
                    .as_ref()
                    .and_then(|n| n.cpus.as_ref().map(ToString::to_string)),
                near: near.and_then(|n| n.near),
            }
        })
        .collect();
    json::line(&Report {
        flag,
        facts,
        devices,
        note,
    })
}
