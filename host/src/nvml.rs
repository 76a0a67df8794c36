//! The node's GPUs as NVML lists them. NVML is loaded only when called:
//! the front ends ask it in a child process with a deadline
//! ([`ask_within`], [`devices_within`], through `crate::deadline`), so
//! that a hung `nvmlInit` holds nobody and NVML is never loaded into
//! slurmstepd or into the process `exec` turns into the application.

use crate::deadline::lines_in_child;
use desi_gpu_map_core::error::{Error, NvmlCause};
use desi_gpu_map_core::settings::config::NvmlSource;
use desi_gpu_map_core::step::NvmlAsk;
use desi_gpu_map_core::text::quote;
use desi_gpu_map_core::wire;
use nvml_wrapper::Nvml;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

/// The core's question (the plugin's and exec's [`desi_gpu_map_core::step::Node::nvml`]),
/// asked of NVML loaded from `source` in a child killed at `timeout`:
/// [`Error::NvmlTimedOut`] past it.
pub fn ask_within(
    ask: NvmlAsk,
    source: &NvmlSource,
    timeout: Duration,
) -> Result<Vec<String>, Error> {
    lines_in_child(timeout, || match ask {
        NvmlAsk::Uuids => uuids(source),
        NvmlAsk::Places => places(source),
    })
}

/// Every GPU NVML enumerates, with its details (show), asked in a child
/// killed at `timeout`, as [`ask_within`] asks.
pub fn devices_within(source: &NvmlSource, timeout: Duration) -> Result<Vec<Device>, Error> {
    let work = || devices(source).map(|found| found.iter().map(device_line).collect());
    lines_in_child(timeout, work)?
        .iter()
        .map(|line| {
            device_from_line(line).ok_or_else(|| {
                wire::broken(format!(
                    "NVML discovery: unreadable device line {}",
                    quote(line)
                ))
            })
        })
        .collect()
}

/// A device as the child writes it: `INDEX UUID BUS-ID USED TOTAL`
/// (UUIDs and bus ids hold no spaces).
fn device_line(d: &Device) -> String {
    format!(
        "{} {} {} {} {}",
        d.index, d.uuid, d.pci_bus_id, d.memory_used, d.memory_total
    )
}

fn device_from_line(line: &str) -> Option<Device> {
    let mut words = line.split_whitespace();
    let mut next = || words.next();
    let device = Device {
        index: next()?.parse().ok()?,
        uuid: next()?.to_string(),
        pci_bus_id: next()?.to_string(),
        memory_used: next()?.parse().ok()?,
        memory_total: next()?.parse().ok()?,
    };
    next().is_none().then_some(device)
}

/// One GPU, as `desi-gpu-map show` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// NVML's index, the order in which it lists the node's GPUs.
    pub index: u32,
    /// The GPU's UUID (`GPU-...`).
    pub uuid: String,
    /// Its PCI bus id, as NVML writes it.
    pub pci_bus_id: String,
    /// Memory in use, in bytes.
    pub memory_used: u64,
    /// Memory in all, in bytes.
    pub memory_total: u64,
}

/// The UUIDs of every GPU NVML enumerates, in NVML's (PCI bus) order.
pub(crate) fn uuids(source: &NvmlSource) -> Result<Vec<String>, Error> {
    each_device(source, |_, d| {
        d.uuid().map_err(|e| failed("nvmlDeviceGetUUID", e))
    })
}

/// The longest CPU mask asked of NVML, in words of `c_ulong`:
/// [`desi_gpu_map_core::cpuset::MAX_CPUS`] CPUs.
const AFFINITY_WORDS: usize =
    desi_gpu_map_core::cpuset::MAX_CPUS / std::ffi::c_ulong::BITS as usize;

/// Every GPU as `closest` locates it, one line each: `UUID BUS-ID MINOR
/// CPULIST` (the CPUs of `nvmlDeviceGetCpuAffinity`, `-` when empty), read
/// by [`desi_gpu_map_core::topology::from_nvml_lines`].
pub(crate) fn places(source: &NvmlSource) -> Result<Vec<String>, Error> {
    each_device(source, |_, d| {
        let (uuid, bus_id) = identity(d)?;
        let minor = d
            .minor_number()
            .map_err(|e| failed("nvmlDeviceGetMinorNumber", e))?;
        let words = d
            .cpu_affinity(AFFINITY_WORDS)
            .map_err(|e| failed("nvmlDeviceGetCpuAffinity", e))?;
        let bits = std::ffi::c_ulong::BITS;
        // c_ulong: 64 bits here, 32 on some targets.
        #[allow(clippy::useless_conversion)]
        let words = words.iter().map(|&w| u64::from(w));
        let set = desi_gpu_map_core::cpuset::CpuSet::from_words(words, bits).unwrap_or_default();
        let shown = if set.is_empty() {
            "-".to_string()
        } else {
            set.to_string()
        };
        Ok(format!("{uuid} {bus_id} {minor} {shown}"))
    })
}

/// Every GPU with its PCI bus id and memory use.
pub(crate) fn devices(source: &NvmlSource) -> Result<Vec<Device>, Error> {
    each_device(source, |index, d| {
        let (uuid, pci_bus_id) = identity(d)?;
        let memory = d
            .memory_info()
            .map_err(|e| failed("nvmlDeviceGetMemoryInfo", e))?;
        Ok(Device {
            index,
            uuid,
            pci_bus_id,
            memory_used: memory.used,
            memory_total: memory.total,
        })
    })
}

/// A device's UUID and PCI bus id.
fn identity(d: &nvml_wrapper::Device) -> Result<(String, String), Error> {
    let uuid = d.uuid().map_err(|e| failed("nvmlDeviceGetUUID", e))?;
    let pci = d
        .pci_info()
        .map_err(|e| failed("nvmlDeviceGetPciInfo", e))?;
    Ok((uuid, pci.bus_id))
}

/// Applies `read` to each GPU NVML enumerates, with its NVML index.
fn each_device<T>(
    source: &NvmlSource,
    read: impl Fn(u32, &nvml_wrapper::Device) -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    with_nvml(source, |nvml| {
        let count = nvml
            .device_count()
            .map_err(|e| failed("nvmlDeviceGetCount", e))?;
        (0..count)
            .map(|index| {
                let device = nvml
                    .device_by_index(index)
                    .map_err(|e| failed("nvmlDeviceGetHandleByIndex", e))?;
                read(index, &device)
            })
            .collect()
    })
}

/// Opens NVML, runs `query`, and shuts NVML down again. A panic inside the
/// wrapper (it panics when a library lacks `nvmlShutdown`) becomes an error,
/// so that it never unwinds into the plugin's host.
fn with_nvml<T>(
    source: &NvmlSource,
    query: impl FnOnce(&Nvml) -> Result<T, Error>,
) -> Result<T, Error> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let nvml = open(source)?;
        query(&nvml)
    }));
    outcome.unwrap_or(Err(Error::NvmlMisbehaved))
}

fn open(source: &NvmlSource) -> Result<Nvml, Error> {
    let mut builder = Nvml::builder();
    let name = match source {
        NvmlSource::Off => return Err(Error::NvmlOff),
        NvmlSource::Auto => "libnvidia-ml.so.1".to_string(),
        NvmlSource::Path(path) => {
            builder.lib_path(path.as_os_str());
            path.display().to_string()
        }
    };
    builder.init().map_err(|e| Error::NvmlInit {
        library: name,
        source: NvmlCause(Arc::new(e)),
    })
}

fn failed(call: &'static str, e: nvml_wrapper::error::NvmlError) -> Error {
    Error::NvmlCall {
        call,
        source: NvmlCause(Arc::new(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use desi_gpu_map_core::error::NvmlFailure;

    #[test]
    fn device_lines_read_back() {
        let d = Device {
            index: 3,
            uuid: "GPU-fake-n1-3".to_string(),
            pci_bus_id: "00000000:04:00.0".to_string(),
            memory_used: 1 << 20,
            memory_total: 80 << 30,
        };
        assert_eq!(device_from_line(&device_line(&d)), Some(d));
        for bad in [
            "",
            "3 GPU-a 0000:04:00.0 1",
            "x GPU-a b 1 2",
            "3 GPU-a b 1 2 extra",
        ] {
            assert_eq!(device_from_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_childs_errors_keep_their_kind() {
        let off = Error::Discovery {
            kind: NvmlFailure::Off,
            why: Error::NvmlOff.to_string(),
        };
        let timeout = Duration::from_secs(10);
        assert_eq!(
            ask_within(NvmlAsk::Uuids, &NvmlSource::Off, timeout),
            Err(off.clone())
        );
        assert_eq!(devices_within(&NvmlSource::Off, timeout), Err(off));
        let missing = NvmlSource::Path("/nonexistent/libnvidia-ml.so.1".into());
        let got = ask_within(NvmlAsk::Places, &missing, timeout);
        assert!(
            matches!(&got, Err(Error::Discovery { kind: NvmlFailure::Init, why })
                if why.contains("/nonexistent/libnvidia-ml.so.1")),
            "{got:?}"
        );
    }
}
