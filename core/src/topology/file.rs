//! The topology file format (see the parent module's documentation), for
//! `desi-gpu-map plan --topology FILE`.

use super::gpu_place::{union_of, GpuPlace, Topology};
use super::unlocated::Unlocated;
use crate::cpuset::CpuSet;
use crate::runtime::MAX_NODE_GPUS;
use crate::slurm::gpus::parse_gpu_list;
use crate::text::quote;
use std::fmt;

/// Why a topology file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTopology {
    pub(crate) line: usize,
    pub(crate) why: String,
}

impl fmt::Display for BadTopology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "topology line {}: {}; each line is TOKEN NUMA LOCAL-CPUS (`-` for unknown) \
             or `cpus CPULIST`",
            self.line, self.why
        )
    }
}

impl std::error::Error for BadTopology {}

fn parse_numa(text: &str) -> Result<Option<u32>, Unlocated> {
    match text {
        "-" | "-1" | "N/A" => Ok(None),
        _ => text
            .parse::<u32>()
            .map(Some)
            .map_err(|_| Unlocated::BadNuma {
                text: text.to_string(),
            }),
    }
}

fn parse_cpus(text: &str) -> Result<Option<CpuSet>, crate::cpuset::BadCpuSet> {
    match text {
        "-" | "N/A" => Ok(None),
        _ => CpuSet::parse_list(text).map(Some),
    }
}

impl Topology {
    /// Reads the file format above.
    pub fn parse(text: &str) -> Result<Topology, BadTopology> {
        let mut gpus: Vec<GpuPlace> = Vec::new();
        let mut node: Option<CpuSet> = None;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let fail = |why: String| BadTopology { line, why };
            let content = raw.split('#').next().unwrap_or_default().trim();
            let words: Vec<&str> = content.split_whitespace().collect();
            match words.as_slice() {
                [] => {}
                ["cpus", list] => {
                    let set = CpuSet::parse_list(list).map_err(|e| fail(e.to_string()))?;
                    node = Some(set);
                }
                [token, numa, cpus] => {
                    // As the step's list would name it: one index or UUID.
                    if parse_gpu_list(token).map(|l| l.len()) != Ok(1) {
                        return Err(fail(format!(
                            "GPU {} is not an index or a GPU-/MIG- UUID",
                            quote(token)
                        )));
                    }
                    if gpus.iter().any(|g| g.token == *token) {
                        return Err(fail(format!("GPU {} is listed twice", quote(token))));
                    }
                    if gpus.len() >= MAX_NODE_GPUS {
                        return Err(fail(format!("more than {MAX_NODE_GPUS} GPUs")));
                    }
                    gpus.push(GpuPlace {
                        token: (*token).to_string(),
                        numa: parse_numa(numa).map_err(|e| fail(e.to_string()))?,
                        cpus: parse_cpus(cpus).map_err(|e| fail(e.to_string()))?,
                    });
                }
                _ => return Err(fail(format!("cannot read {}", quote(content)))),
            }
        }
        if gpus.is_empty() {
            return Err(BadTopology {
                line: 0,
                why: "no GPU is listed".to_string(),
            });
        }
        let cpus = node.unwrap_or_else(|| union_of(&gpus));
        Ok(Topology { cpus, gpus })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_parse() {
        let t = Topology::parse(
            "# a test node\ncpus 0-7\n0 1 4-7   # far\n1 0 0-3\nGPU-ab -1 -\n2 N/A N/A\n",
        )
        .unwrap();
        assert_eq!(t.cpus.to_string(), "0-7");
        assert_eq!(t.tokens(), ["0", "1", "GPU-ab", "2"]);
        assert_eq!(t.place("0").unwrap().numa, Some(1));
        assert_eq!(t.place("GPU-ab").unwrap().cpus, None);
        assert_eq!(t.place("2").unwrap().numa, None);
        assert!(t.place("9").is_none());
        let t = Topology::parse("0 0 0-3\n1 1 4-7\n").unwrap();
        assert_eq!(t.cpus.to_string(), "0-7");
    }

    #[test]
    fn bad_files_name_the_line() {
        for (text, line, part) in [
            ("", 0, "no GPU is listed"),
            ("0 0 0-3\n0 1 4-7\n", 2, "listed twice"),
            ("0 x 0-3\n", 1, "NUMA node \"x\""),
            ("0 0 0-z\n", 1, "CPU set \"0-z\""),
            ("0 0\n", 1, "cannot read \"0 0\""),
            ("cpus a\n0 0 0\n", 1, "CPU set \"a\""),
        ] {
            let err = Topology::parse(text).unwrap_err();
            assert_eq!(err.line, line, "{text}");
            assert!(err.to_string().contains(part), "{err}");
        }
        let many: String = (0..65).map(|i| format!("{i} 0 0\n")).collect();
        assert!(Topology::parse(&many).is_err());
    }
}
