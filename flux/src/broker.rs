//! The grant of the broker a job shell runs under, gathered for the core
//! ([`BrokerGrant`]): flux-core's job-exec starts every node's shell with
//! rank 0's environment (`src/modules/job-exec/exec_cmd.c`), so a shell on
//! another node reads its own broker's from that broker's process, found
//! by the broker's own `broker.pid`; and where the instance's R came from,
//! from the instance's `resource.eventlog`.

use crate::error::PluginError;
use crate::ffi::{Broker, Shell};
use desi_gpu_map_core::flux::{BrokerGrant, BrokerVars, Origin};
use serde::Deserialize;

/// The KVS key of the resource module's eventlog (`RESLOG_KEY`).
const RESOURCE_EVENTLOG: &str = "resource.eventlog";

/// What the shell knows of its broker's grant.
pub fn grant(shell: Shell) -> BrokerGrant {
    let inherited = BrokerVars::read(|name| std::env::var(name).ok());
    let broker = shell.broker();
    let own = broker
        .ok_or(PluginError::NoBroker)
        .and_then(|b| own_vars(b, &inherited));
    let origin = broker.ok_or(PluginError::NoBroker).and_then(origin);
    BrokerGrant {
        own: own.map_err(|e| e.to_string()),
        inherited,
        origin: origin.map_err(|e| e.to_string()),
    }
}

/// The node's own broker's grant: the shell's own environment on rank 0,
/// whose broker's it is; else read from the broker's process.
fn own_vars(broker: Broker, inherited: &BrokerVars) -> Result<BrokerVars, PluginError> {
    if broker.rank()? == 0 {
        return Ok(inherited.clone());
    }
    let pid = broker.attr("broker.pid").ok_or(PluginError::NoBrokerPid)?;
    let Ok(pid) = pid.trim().parse::<u32>() else {
        return Err(PluginError::BadBrokerPid { pid });
    };
    let path = format!("/proc/{pid}/environ");
    let text = std::fs::read(&path).map_err(|error| PluginError::Environ { path, error })?;
    Ok(BrokerVars::read(|name| environ_var(&text, name)))
}

/// A variable of a process's initial environment (`/proc/PID/environ`).
fn environ_var(text: &[u8], name: &str) -> Option<String> {
    text.split(|&b| b == 0).find_map(|entry| {
        let value = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(value).into_owned())
    })
}

/// Where the instance's R came from: the method of the last
/// `resource-define` event of its resource eventlog.
fn origin(broker: Broker) -> Result<Origin, PluginError> {
    let log = broker.kvs(RESOURCE_EVENTLOG)?;
    define_method(&log)
        .map(|method| Origin::of_method(&method))
        .ok_or(PluginError::NoDefine {
            key: RESOURCE_EVENTLOG,
        })
}

/// An eventlog's event, as far as the method is concerned.
#[derive(Deserialize)]
struct Event {
    name: String,
    #[serde(default)]
    context: Option<Context>,
}

#[derive(Deserialize)]
struct Context {
    method: Option<String>,
}

/// The method of the last `resource-define` event of an eventlog (one JSON
/// object a line).
fn define_method(log: &str) -> Option<String> {
    log.lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<Event>(line).ok())
        .filter(|event| event.name == "resource-define")
        .find_map(|event| event.context?.method)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_environment_is_read_by_exact_name() {
        let text = b"CUDA_VISIBLE_DEVICES_X=9\0CUDA_VISIBLE_DEVICES=2,3\0SLURM_STEP_GPUS=\0";
        assert_eq!(
            environ_var(text, "CUDA_VISIBLE_DEVICES").as_deref(),
            Some("2,3")
        );
        assert_eq!(environ_var(text, "SLURM_STEP_GPUS").as_deref(), Some(""));
        assert_eq!(environ_var(text, "CUDA"), None);
        assert_eq!(environ_var(b"", "CUDA_VISIBLE_DEVICES"), None);
    }

    #[test]
    fn the_last_resource_define_names_the_method() {
        // As flux-core 0.88.0 writes it (src/modules/resource/inventory.c).
        let log = "{\"timestamp\":1.5,\"name\":\"restart\",\"context\":{\"ranks\":\"0\"}}\n\
                   {\"timestamp\":1.6,\"name\":\"resource-define\",\"context\":{\"method\":\"configuration\"}}\n\
                   {\"timestamp\":1.7,\"name\":\"online\",\"context\":{\"idset\":\"0\"}}\n";
        assert_eq!(define_method(log).as_deref(), Some("configuration"));
        let nested = "{\"timestamp\":1,\"name\":\"resource-define\",\"context\":{\"method\":\"job-info\"}}\n";
        assert_eq!(define_method(nested).as_deref(), Some("job-info"));
        assert_eq!(define_method("{\"name\":\"online\"}\nnot json\n"), None);
    }
}
