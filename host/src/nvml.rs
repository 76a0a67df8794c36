//! The node's GPUs as NVML lists them. NVML is loaded only when called.

use desi_gpu_map_core::error::{Error, NvmlCause};
use desi_gpu_map_core::settings::site::NvmlSource;
use nvml_wrapper::Nvml;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// One GPU, as `desi-gpu-map show` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    pub index: u32,
    pub uuid: String,
    pub pci_bus_id: String,
    pub memory_used: u64,
    pub memory_total: u64,
}

/// The UUIDs of every GPU NVML enumerates, in NVML's (PCI bus) order.
pub fn uuids(source: &NvmlSource) -> Result<Vec<String>, Error> {
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
pub fn places(source: &NvmlSource) -> Result<Vec<String>, Error> {
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
pub fn devices(source: &NvmlSource) -> Result<Vec<Device>, Error> {
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
