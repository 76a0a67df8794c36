//! Where a process that no srun step placed (a rank of `mpirun`, `mpiexec`
//! or PALS) finds its GPUs: the runtime list it inherited, read by its
//! vendor's rules (the vendor's own list, `ROCR_VISIBLE_DEVICES` or
//! `ZE_AFFINITY_MASK`, else `CUDA_VISIBLE_DEVICES`); where it inherited
//! none and runs in no Slurm job, every GPU of the node, as NVML or else
//! the kernel lists them. Inside a Slurm job only an inherited list is the
//! job's. So no rank is ever shown a GPU its process was not given.

use super::locate::discover;
use super::node::Node;
use super::source::{Listed, Missing, StepGpus, WhyNoList};
use crate::env;
use crate::error::Error;
use crate::grant::Grant;
use crate::method::Method;
use crate::runtime::{kernel_gpus, Vendor};
use crate::settings::config::{Config, NvmlSource};
use crate::slurm::gpus::{check_list, parse_gpu_list};
use crate::snapshot::{Snapshot, Var};

/// What a process outside any srun step was given, as its launch's
/// identity records it ([`super::StepIdentity::Launch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// Inside a Slurm job (a batch script, or a launcher's daemon that is
    /// no srun task): the list it inherited, else none.
    InJob,
    /// In no Slurm job: the list it inherited, else every GPU of the node.
    OutsideJob,
    /// A grant the front end hands over as the list itself (a Flux job:
    /// the GPUs R gives it on this node, through its broker's grant); none
    /// where the grant gives none. Said in the grant's words.
    Granted(&'static Grant),
}

/// The lists a process may inherit, for `vendor`: its runtime's own list
/// first, then CUDA's (which HIP also reads).
fn candidates(vendor: Vendor) -> Vec<Var> {
    let mut lists = vec![vendor.carrier()];
    if vendor.carrier() != Var::Cuda {
        lists.push(Var::Cuda);
    }
    lists
}

/// The GPUs the process was given on this node (see the module's
/// comment); `None` where every GPU of the node is its own: it inherited
/// no list and runs in no Slurm job ([`whole_node`]).
pub(super) fn from_given(
    given: Given,
    vars: &Snapshot,
    vendor: Vendor,
) -> Option<Result<StepGpus, Missing>> {
    let cuda = vars.cuda.clone();
    if let Given::Granted(grant) = given {
        // A grant comes in CUDA's list, whatever the vendor (the other
        // lists are not the grant's).
        return Some(match cuda {
            Some(value) => inherited_list(env::CUDA, value, None, given),
            None => Err(Missing::NoGpus(WhyNoList::NoneGranted(grant))),
        });
    }
    let inherited = candidates(vendor)
        .into_iter()
        .find_map(|var| vars.value(var).map(|value| (var.name(), value.to_string())));
    match (inherited, given) {
        (Some((var, value)), _) => Some(inherited_list(var, value, cuda, given)),
        (None, Given::InJob) => Some(Err(Missing::NoGpus(WhyNoList::NothingGiven { node: None }))),
        (None, Given::OutsideJob | Given::Granted(_)) => None,
    }
}

/// The list `var` the process inherited, with the value `cuda` of
/// `CUDA_VISIBLE_DEVICES` beside it; `given` says by whom.
fn inherited_list(
    var: &'static str,
    value: String,
    cuda: Option<String>,
    given: Given,
) -> Result<StepGpus, Missing> {
    if value.trim().is_empty() {
        return Err(Missing::NoGpus(WhyNoList::GivenEmpty { var }));
    }
    let gpus = parse_gpu_list(&value).map_err(|error| {
        let error = Box::new(error);
        Missing::Failed(WhyNoList::BadGiven { var, error })
    })?;
    Ok(StepGpus {
        gpus,
        listed: match given {
            Given::Granted(grant) => Listed::Granted { value, grant },
            Given::InJob | Given::OutsideJob => Listed::Inherited { var, value, cuda },
        },
    })
}

/// Every GPU of the node: NVML's UUIDs (NVIDIA's GPUs, NVML on), else the
/// kernel's listing under the site's `kernel_root`, in PCI bus order
/// (NVIDIA's GPUs by the UUIDs the driver's files name, others by index).
/// `placed` keeps a `closest` step's places from NVML's load, as for a
/// Slurm step.
pub(super) fn whole_node(
    config: &Config,
    node: &dyn Node,
    method: Method,
    vendor: Vendor,
    placed: &mut Option<Result<Vec<String>, Error>>,
) -> Result<StepGpus, Missing> {
    let mut why = Vec::new();
    if vendor.has_nvml() && config.nvml != NvmlSource::Off {
        match discover(node, config, method, placed) {
            Ok(uuids) if uuids.is_empty() => why.push("NVML finds no GPU".to_string()),
            Ok(uuids) => match check_list(&uuids) {
                Ok(()) => {
                    return Ok(StepGpus {
                        gpus: uuids,
                        listed: Listed::Nvml { exported: None },
                    })
                }
                Err(e) => why.push(format!("NVML's device list is unusable: {e}")),
            },
            Err(e) => why.push(e.to_string()),
        }
    }
    let last = match kernel_gpus(node.files(), &config.kernel_root, vendor) {
        Ok(mut gpus) if !gpus.is_empty() => {
            gpus.sort_by(|a, b| a.bus_id.cmp(&b.bus_id));
            let uuids: Option<Vec<String>> = gpus.iter().map(|g| g.uuid.clone()).collect();
            let gpus = match uuids {
                Some(uuids) if vendor.has_nvml() => uuids,
                _ => (0..gpus.len()).map(|i| i.to_string()).collect(),
            };
            return Ok(StepGpus {
                gpus,
                listed: Listed::Kernel,
            });
        }
        Ok(_) => format!("the kernel lists no {} GPU", vendor_name(vendor)),
        Err(e) => e,
    };
    why.push(last);
    Err(Missing::NoGpus(WhyNoList::NothingGiven {
        node: Some(why.join("; ")),
    }))
}

fn vendor_name(vendor: Vendor) -> &'static str {
    crate::names::Named::name(vendor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::option::Choice;
    use crate::settings::site::parse_args;
    use crate::step::testing::*;
    use crate::step::*;

    /// A launch of no known tag whose rank was given `given`.
    fn rank_given(given: Given) -> StepIdentity {
        StepIdentity::Launch {
            tag: None,
            given: Some(given),
        }
    }

    /// A launcher's rank with these variables, given `given`.
    fn launched(
        pairs: &[(&str, &str)],
        given: Given,
        config: &Config,
        nvml: Result<Vec<String>, Error>,
    ) -> (StepPlan, usize) {
        let node = FakeNode::new(pairs, nvml);
        let request = Some(asking(Choice::Map(Method::Contiguous)));
        let plan = plan_as(&node, rank_given(given), config, request);
        (plan, node.calls.get())
    }

    #[test]
    fn an_inherited_list_is_the_ranks_whatever_it_names() {
        let config = Config::default();
        // Two ranks: on four GPUs the second holds two of them.
        for (cuda, second) in [("4,5,6,7", "6,7"), ("GPU-a,GPU-b", "GPU-b")] {
            let (p, calls) = launched(
                &[("CUDA_VISIBLE_DEVICES", cuda)],
                Given::OutsideJob,
                &config,
                Ok(uuids(2)),
            );
            let map = mapped(p);
            assert_eq!(calls, 0, "NVML is not asked");
            assert_eq!(map.listed.source(), "inherited");
            // Its order is kept as the process had it: no PCI order added.
            assert!(!map.rendering.pci_order);
            let out = map_task(&map, &task(1, 2, Some(cuda)));
            assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some(second));
            assert_eq!(get(&out, "CUDA_DEVICE_ORDER"), None);
        }
        // Six ranks on four GPUs.
        let (p, _) = launched(
            &[("CUDA_VISIBLE_DEVICES", "4,5,6,7")],
            Given::InJob,
            &config,
            Ok(vec![]),
        );
        let map = mapped(p);
        let got: Vec<String> = (0..6)
            .map(|l| {
                let out = map_task(&map, &task(l, 6, Some("4,5,6,7")));
                get(&out, "CUDA_VISIBLE_DEVICES").unwrap().to_string()
            })
            .collect();
        assert_eq!(got, ["4", "4", "5", "5", "6", "7"]);
    }

    #[test]
    fn an_empty_or_bad_list_and_no_list_in_a_job_map_nothing() {
        let config = Config::default();
        let (p, _) = launched(
            &[("CUDA_VISIBLE_DEVICES", "")],
            Given::OutsideJob,
            &config,
            Ok(uuids(2)),
        );
        let why = aside(p);
        assert!(why.is_routine());
        assert_eq!(
            why.to_string(),
            "CUDA_VISIBLE_DEVICES is empty: this process was given no GPU; tasks left unchanged"
        );
        let (p, _) = launched(
            &[("CUDA_VISIBLE_DEVICES", "1,1")],
            Given::OutsideJob,
            &config,
            Ok(uuids(2)),
        );
        assert_eq!(
            aside(p).to_string(),
            "CUDA_VISIBLE_DEVICES, the GPU list this process inherited, is unusable: GPU list \
             \"1,1\" names \"1\" twice; tasks left unchanged"
        );
        let (p, calls) = launched(&[], Given::InJob, &config, Ok(uuids(2)));
        assert_eq!(calls, 0);
        let why = aside(p);
        assert!(why.is_routine());
        assert_eq!(
            why.to_string(),
            "this process inherited no GPU list, and in a Slurm job the node's other GPUs are \
             not its own; tasks left unchanged"
        );
    }

    #[test]
    fn with_no_list_and_no_job_every_gpu_of_the_node() {
        let config = Config::default();
        let (p, calls) = launched(&[], Given::OutsideJob, &config, Ok(uuids(3)));
        let map = mapped(p);
        assert_eq!((map.gpus.clone(), calls), (uuids(3), 1));
        assert_eq!(map.listed.source(), "nvml");
        // NVML off: the kernel's listing, here NVIDIA's driver files.
        let off = parse_args(&["nvml=off"]).unwrap();
        let mut node = FakeNode::new(&[], Ok(uuids(3)));
        for (bus, uuid, minor) in [("0000:02:00.0", "GPU-b", 1), ("0000:01:00.0", "GPU-a", 0)] {
            let info = format!("GPU UUID: {uuid}\nDevice Minor: {minor}\n");
            let path = format!("/proc/driver/nvidia/gpus/{bus}/information");
            node.files.texts.insert(path.into(), info);
        }
        let request = Some(asking(Choice::Map(Method::RoundRobin)));
        let map = mapped(plan_as(&node, rank_given(Given::OutsideJob), &off, request));
        assert_eq!(map.gpus, ["GPU-a", "GPU-b"]);
        assert_eq!((map.listed.source(), node.calls.get()), ("kernel", 0));
        // Neither lists any: nothing to map, said with verbose only.
        let none = Error::Discovery {
            kind: crate::error::NvmlFailure::Init,
            why: "NVML: no library".into(),
        };
        let (p, _) = launched(&[], Given::OutsideJob, &Config::default(), Err(none));
        let why = aside(p);
        assert!(why.is_routine());
        assert!(
            why.to_string().starts_with(
                "this process inherited no GPU list, and the node lists none: NVML: no library; "
            ),
            "{why}"
        );
    }

    #[test]
    fn a_flux_jobs_list_is_rs_and_said_in_fluxs_words() {
        let config = Config::default();
        // R gives the job no GPU here: said as Flux's, routine.
        let (p, calls) = launched(
            &[],
            Given::Granted(&crate::flux::GRANT),
            &config,
            Ok(uuids(2)),
        );
        let why = aside(p);
        assert!(why.is_routine());
        assert_eq!(calls, 0);
        assert_eq!(
            why.to_string(),
            "R gives this Flux job no GPU on this node; tasks left unchanged"
        );
        // Flux's gpu-affinity sets CUDA_DEVICE_ORDER in the job: left as it
        // is, and nothing said of Slurm's indices.
        let job = [
            ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
            ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        ];
        for pairs in [&job[..], &job[..1]] {
            let (p, _) = launched(
                pairs,
                Given::Granted(&crate::flux::GRANT),
                &config,
                Ok(vec![]),
            );
            let map = mapped(p);
            assert_eq!(map.listed.source(), "flux");
            assert!(!map.rendering.pci_order);
            let notes = map.notes.join("\n");
            assert!(
                !notes.contains("Slurm") && !notes.contains("CUDA_DEVICE_ORDER"),
                "{notes}"
            );
            let out = map_task(&map, &task(1, 6, Some("0,1,2,3")));
            assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("0"));
            assert_eq!(get(&out, "CUDA_DEVICE_ORDER"), None);
        }
        // A vendor the site's conf names, as the conf names it.
        let fixed = parse_args(&["vendor=nvidia"]).unwrap();
        let (p, _) = launched(
            &job,
            Given::Granted(&crate::flux::GRANT),
            &fixed,
            Ok(vec![]),
        );
        assert_eq!(
            mapped(p).notes,
            ["GPU lists written for nvidia runtimes (vendor = \"nvidia\" in the plugin's conf)"]
        );
        // AMD: R's list carries the GPU, said as Flux's. Intel: Level Zero
        // reads no list the job has, said so.
        let amd = parse_args(&["vendor=amd"]).unwrap();
        let (p, _) = launched(
            &job[..1],
            Given::Granted(&crate::flux::GRANT),
            &amd,
            Ok(vec![]),
        );
        let map = mapped(p);
        assert!(
            map.notes.contains(
                &"ROCR_VISIBLE_DEVICES not set: R's GPUs come to this Flux job in \
                  CUDA_VISIBLE_DEVICES, which carries the GPU itself"
                    .to_string()
            ),
            "{:?}",
            map.notes
        );
        let out = map_task(&map, &task(1, 6, Some("0,1,2,3")));
        assert_eq!(get(&out, "CUDA_VISIBLE_DEVICES"), Some("0"));
        let intel = parse_args(&["vendor=intel"]).unwrap();
        let (p, _) = launched(
            &job[..1],
            Given::Granted(&crate::flux::GRANT),
            &intel,
            Ok(vec![]),
        );
        assert_eq!(
            aside(p).to_string(),
            "R's GPUs come to this Flux job in CUDA_VISIBLE_DEVICES only, and Level Zero reads \
             ZE_AFFINITY_MASK alone (vendor = \"intel\" in the plugin's conf); tasks left \
             unchanged"
        );
        // A launcher's rank keeps its words.
        let (p, _) = launched(&job, Given::InJob, &config, Ok(vec![]));
        let map = mapped(p);
        assert_eq!(map.listed.source(), "inherited");
        assert!(map.notes.contains(
            &"CUDA_DEVICE_ORDER=\"PCI_BUS_ID\" kept as set; Slurm's indices follow the PCI bus \
              order"
                .to_string()
        ));
        // closest: R's GPUs located through NVML's places (GPUs 0 and 1
        // next to CPU 1, 2 and 3 next to CPU 0), each task placed by the
        // CPUs Flux bound its shell to.
        let places: Vec<String> = (0..4)
            .map(|i| format!("GPU-u{i} 00000000:0{}:00.0 {i} {}", i + 1, 1 - i / 2))
            .collect();
        let mut node = FakeNode::new(&job, Ok(places));
        node.places = None;
        let request = Some(asking(Choice::Map(Method::Closest)));
        let map = mapped(plan_as(
            &node,
            rank_given(Given::Granted(&crate::flux::GRANT)),
            &config,
            request,
        ));
        assert_eq!(node.calls.get(), 1);
        assert!(matches!(map.near, GpuCpus::Located(_)), "{:?}", map.near);
        let bound = |cpus: &str, local: usize, count: usize| {
            let mut t = task(local, count, Some("0,1,2,3"));
            t.cpus.own = Some(crate::cpuset::CpuSet::parse_list(cpus).unwrap());
            map_task(&map, &t)
        };
        assert_eq!(
            get(&bound("0", 0, 1), "CUDA_VISIBLE_DEVICES"),
            Some("2,3,0,1")
        );
        assert_eq!(get(&bound("1", 0, 2), "CUDA_VISIBLE_DEVICES"), Some("0,1"));
        // Bound to CPUs as near to every GPU (-o cpu-affinity=off, or a
        // job on both sockets): contiguous, said once, in Flux's words.
        let alike = bound("0-1", 0, 2);
        assert_eq!(get(&alike, "CUDA_VISIBLE_DEVICES"), Some("0,1"));
        let said = alike.say.join("\n");
        assert!(
            said.contains("as near to every GPU as to any")
                && said.contains("cpu-affinity")
                && !said.contains("srun"),
            "{said}"
        );
        assert!(bound("0-1", 1, 2).say.is_empty());
    }

    #[test]
    fn a_vendors_own_list_comes_first() {
        assert_eq!(candidates(Vendor::Amd), [Var::Rocr, Var::Cuda]);
        assert_eq!(candidates(Vendor::Intel), [Var::Ze, Var::Cuda]);
        assert_eq!(candidates(Vendor::Nvidia), [Var::Cuda]);
    }
}
