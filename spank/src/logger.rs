//! Routes the `log` crate into Slurm's own log (slurmd's log file on a
//! node, the terminal in srun), at Slurm's matching levels.

use log::{Level, LevelFilter, Log, Metadata, Record};
use slurm_spank::{spank_log, LogLevel};

struct SlurmLog;

static LOGGER: SlurmLog = SlurmLog;

impl Log for SlurmLog {
    fn enabled(&self, _: &Metadata) -> bool {
        true
    }

    fn log(&self, record: &Record) {
        let level = match record.level() {
            Level::Error => LogLevel::Error,
            Level::Warn | Level::Info => LogLevel::Info,
            Level::Debug => LogLevel::Debug,
            Level::Trace => LogLevel::Debug2,
        };
        // Lines meant for a task's stderr already carry the prefix.
        let message = record.args().to_string();
        let message = message.strip_prefix("desi-gpu-map: ").unwrap_or(&message);
        spank_log(level, &format!("desi-gpu-map: {message}"));
    }

    fn flush(&self) {}
}

/// Installs the logger once per process. In srun, sbatch and salloc only
/// errors and warnings reach the user's terminal.
pub fn install(client: bool) {
    // A second call in the same process fails harmlessly.
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(if client {
        LevelFilter::Warn
    } else {
        LevelFilter::Debug
    });
}
