use super::*;
use crate::flux::{BrokerVars, Origin};
use crate::settings::site::parse_args;
use crate::step::testing::{mapped, FakeNode};

/// A job of `tasks` tasks asking `asked` (the option's words) on a node
/// whose broker holds `broker`, R giving it `r`; the site's `conf` words.
fn facts(conf: &[&str], asked: Option<&str>, r: &str, broker: Option<&str>) -> JobFacts {
    JobFacts {
        config: parse_args(conf).unwrap(),
        asked: asked.map(|a| crate::settings::option::parse_option(a).unwrap()),
        affinity: None,
        jobid: 15_602_810_880,
        shell_rank: 0,
        ntasks: 4,
        r_gpus: Some(r.to_string()),
        grant: BrokerGrant {
            own: Ok(BrokerVars {
                list: broker.map(str::to_string),
                ..BrokerVars::default()
            }),
            inherited: BrokerVars::default(),
            origin: Ok(Origin::Own),
        },
        uri: Some("local:///tmp/flux-x/local-0".to_string()),
        vars: Snapshot::default(),
        uid: 1000,
        gid: 1000,
        token: 7,
    }
}

fn node() -> FakeNode {
    FakeNode::new(&[], Err(crate::Error::NvmlOff))
}

#[test]
fn a_mapped_job_lists_rs_gpus_through_its_brokers_grant() {
    let job = plan_job(facts(&[], Some("contiguous"), "0-1", Some("2,3")), &node()).unwrap();
    assert_eq!(job.gpus.list, ["2", "3"]);
    assert_eq!(job.vars.cuda.as_deref(), Some("2,3"));
    assert_eq!(mapped(job.plan).gpus, ["2", "3"]);
    assert!(job.say.is_empty());
}

#[test]
fn help_says_the_usage_and_runs_nothing() {
    let no = plan_job(facts(&[], Some("help"), "0-3", None), &node()).unwrap_err();
    assert!(
        no.say.iter().any(|l| l.contains("-o desi-gpu-map")),
        "{no:?}"
    );
    assert_eq!(
        no.why,
        "-o desi-gpu-map=help prints the usage above and runs nothing"
    );
}

#[test]
fn a_request_the_site_refuses_is_said_in_fluxs_words() {
    let no = plan_job(
        facts(&["mps=off"], Some("contiguous,mps"), "0-3", None),
        &node(),
    );
    assert!(no.unwrap_err().why.contains("mps=off in the plugin's conf"));
}

#[test]
fn a_grant_beyond_the_broker_refuses_only_a_job_that_would_be_mapped() {
    let asked = facts(&[], Some("contiguous"), "0-3", Some("2,3"));
    assert!(plan_job(asked, &node())
        .unwrap_err()
        .why
        .contains("R gives the job GPU 2"));
    // Not mapped (no option, no site default): the plan stands aside.
    let quiet = plan_job(facts(&[], None, "0-3", Some("2,3")), &node()).unwrap();
    assert!(quiet.gpus.list.is_empty());
}

#[test]
fn gpu_affinity_by_name_wins_over_the_default_said_by_the_first_shell() {
    let mut job = facts(&["default=contiguous"], None, "0-3", None);
    job.affinity = Some("per-task".to_string());
    let first = plan_job(job.clone(), &node()).unwrap();
    assert!(matches!(
        first.plan,
        StepPlan::Unmapped(_) | StepPlan::Untouched
    ));
    assert_eq!(first.say.len(), 1, "{:?}", first.say);
    assert!(first.say[0].contains("over the site's default"));
    job.shell_rank = 1;
    assert!(plan_job(job.clone(), &node()).unwrap().say.is_empty());
    // The option by name wins, said once.
    job.shell_rank = 0;
    job.asked = Some(crate::settings::option::parse_option("roundrobin").unwrap());
    let option = plan_job(job, &node()).unwrap();
    assert!(option.say[0].contains("is replaced by -o desi-gpu-map"));
    assert_eq!(mapped(option.plan).gpus, ["0", "1", "2", "3"]);
}

#[test]
fn the_control_daemon_is_found_on_the_jobs_path_where_the_site_names_none() {
    let node = node();
    let mut files = crate::step::testing::FakeFiles::default();
    let bin = PathBuf::from("/opt/nv/nvidia-cuda-mps-control");
    files.stats.insert(
        bin.clone(),
        crate::files::Stat {
            uid: 0,
            mode: 0o755,
            is_dir: false,
        },
    );
    let mut settings = parse_args::<&str>(&[]).unwrap().mps;
    control_on_path(&mut settings, Some("relative:/usr/bin:/opt/nv"), &files);
    assert_eq!(settings.control, Some(bin));
    assert_eq!(settings.control_named_by, "the job's PATH");
    // None found: the words name what would name one, as Flux writes it.
    let mut settings = parse_args::<&str>(&[]).unwrap().mps;
    control_on_path(&mut settings, Some("/usr/bin"), node.files());
    assert_eq!(settings.control, None);
    assert!(
        settings.control_named_by.contains("mps_control = "),
        "{}",
        settings.control_named_by
    );
}
