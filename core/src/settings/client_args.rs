//! Where in srun's, sbatch's or salloc's command line an option was typed:
//! among the client's own options, or in the arguments of the program (the
//! batch script) that follow them.
//!
//! The clients parse with `getopt_long` and stop at `--` or at the first
//! word that is neither an option nor an option's value: the program. So
//! the scan must know which options take their value in the next word
//! (`-w n1`, `--nodelist n1`). The lists below were measured on Slurm
//! 22.05.8, 24.11.5 and 26.05.5 (`srun --NAME` and `srun -X` answer "requires
//! an argument"; identical on all three), and `value_options_are_slurms`
//! in tests/cluster/input.rs checks them on every series the suite runs. An option
//! missing here only makes the scan stop early, at its value: an option
//! after it is then taken for the program's, never the other way round.

/// The option's name, as users type it after `--`.
pub const OPTION: &str = "desi-gpu-map";
/// The plugin's name, as Slurm knows it (the `.so` exports it).
pub const PLUGIN: &str = "desi_gpu_map";

/// The client whose command line is scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    /// srun.
    Srun,
    /// sbatch or salloc (SPANK's allocator context, shared by both): their
    /// value options are the same, except those that one of them rejects.
    Allocator,
}

/// Short options whose value is the rest of the word or the next word, in
/// any of the three clients: a letter one client lacks makes that client
/// refuse the command line before the plugin reads it.
const VALUE_LETTERS: &str = "ABCDFGJLMNSTabcdeimnopqrtwx";

/// Long options whose value is after `=` or in the next word, likewise.
const VALUE_NAMES: [&str; 109] = [
    "accel-bind",
    "account",
    "acctg-freq",
    "array",
    "batch",
    "bb",
    "bbf",
    "bcast-exclude",
    "begin",
    "chdir",
    "cluster",
    "cluster-constraint",
    "clusters",
    "comment",
    "constraint",
    "container",
    "container-id",
    "container-type",
    "context",
    "core-spec",
    "cores-per-socket",
    "cpu-bind",
    "cpu-freq",
    "cpu_bind",
    "cpus-per-gpu",
    "cpus-per-task",
    "deadline",
    "delay-boot",
    "dependency",
    "distribution",
    "epilog",
    "error",
    "exclude",
    "export",
    "export-file",
    "extra",
    "extra-node-info",
    "gid",
    "gpu-bind",
    "gpu-freq",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "gpus-per-task",
    "gres",
    "gres-flags",
    "het-group",
    "hint",
    "ignore-signals",
    "input",
    "job-name",
    "jobid",
    "kill-on-invalid-dep",
    "licenses",
    "mail-type",
    "mail-user",
    "mcs-label",
    "mem",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "mem-update",
    "mincpus",
    "mpi",
    "msg-timeout",
    "network",
    "nodefile",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-node",
    "ntasks-per-socket",
    "ntasks-per-tres",
    "open-mode",
    "output",
    "pack-group",
    "partition",
    "power",
    "prefer",
    "priority",
    "profile",
    "prolog",
    "qos",
    "relative",
    "reservation",
    "resources",
    "segment",
    "signal",
    "slurmd-debug",
    "sockets-per-node",
    "switches",
    "task-epilog",
    "task-prolog",
    "tasks-per-node",
    "thread-spec",
    "threads",
    "threads-per-core",
    "time",
    "time-min",
    "tmp",
    "treewidth",
    "tres-bind",
    "tres-per-task",
    "uid",
    "wait-all-nodes",
    "wckey",
    "wrap",
];

/// srun's `-W`/`--wait` take a value; sbatch's take none.
const SRUN_VALUE_LETTER: char = 'W';
const SRUN_VALUE_NAME: &str = "wait";

/// The value options, for the test that checks them against Slurm.
pub fn value_options(client: Client) -> (String, Vec<&'static str>) {
    let mut letters = VALUE_LETTERS.to_string();
    let mut names = VALUE_NAMES.to_vec();
    if client == Client::Srun {
        letters.push(SRUN_VALUE_LETTER);
        names.push(SRUN_VALUE_NAME);
    }
    (letters, names)
}

/// getopt_long takes any unambiguous start of a long option's name:
/// `--desi` is `--desi-gpu-map`. `--d` and `--de` are not (`--deadline`,
/// `--delay-boot`, `--dependency`): the clients refuse them.
const SHORTEST_ABBREVIATION: usize = 3;

/// What one word of the command line is to the client.
#[derive(Debug, PartialEq, Eq)]
enum Word {
    /// `--desi-gpu-map`, with its value or before it.
    Ours,
    /// An option whose value is the next word.
    ValueNext,
    /// Another option, complete in this word.
    Option,
    /// `--` or the program: the client's options end here.
    End,
}

/// True when the client's own options include `--desi-gpu-map`
/// (`--desi-gpu-map=VALUE`, `--desi-gpu-map VALUE`, or an abbreviation such
/// as `--desi=VALUE`). `args` is the client's argv, its own name first.
pub(crate) fn typed_option(args: &[String], client: Client) -> bool {
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        match word_kind(word, client) {
            Word::Ours => return true,
            Word::End => return false,
            Word::ValueNext => {
                words.next();
            }
            Word::Option => {}
        }
    }
    false
}

fn word_kind(word: &str, client: Client) -> Word {
    if word == "--" {
        return Word::End;
    }
    if let Some(long) = word.strip_prefix("--") {
        return long_kind(long, client);
    }
    match word.strip_prefix('-') {
        Some(letters) if !letters.is_empty() => letters_kind(letters, client),
        _ => Word::End,
    }
}

/// `--NAME`, `--NAME=VALUE` or an abbreviation of NAME.
fn long_kind(long: &str, client: Client) -> Word {
    let (name, value) = match long.split_once('=') {
        Some((name, _)) => (name, true),
        None => (long, false),
    };
    if name.len() >= SHORTEST_ABBREVIATION && OPTION.starts_with(name) {
        return Word::Ours;
    }
    let takes_value =
        VALUE_NAMES.contains(&name) || (client == Client::Srun && name == SRUN_VALUE_NAME);
    if takes_value && !value {
        Word::ValueNext
    } else {
        Word::Option
    }
}

/// `-abc`: letters without a value, up to the first one that takes the
/// rest of the word as its value, or the next word when nothing is left.
fn letters_kind(letters: &str, client: Client) -> Word {
    let takes_value =
        |c: char| VALUE_LETTERS.contains(c) || (client == Client::Srun && c == SRUN_VALUE_LETTER);
    match letters.char_indices().find(|&(_, c)| takes_value(c)) {
        Some((at, c)) if at + c.len_utf8() == letters.len() => Word::ValueNext,
        _ => Word::Option,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(line: &str, client: Client) -> bool {
        let args: Vec<String> = line.split(' ').map(String::from).collect();
        typed_option(&args, client)
    }

    #[test]
    fn the_option_counts_among_the_clients_own_options() {
        for line in [
            "srun --desi-gpu-map=help true",
            "srun --desi-gpu-map help true",
            "srun -n 2 --desi-gpu-map=help true",
            "srun -n2 -l --desi-gpu-map=help true",
            "srun -ln 2 --desi-gpu-map=help true",
            "srun --nodelist n1 --desi-gpu-map=help true",
            "srun --nodelist=n1 --desi-gpu-map=help true",
            "srun --exclusive --desi-gpu-map=help true",
            "srun -W 5 --desi-gpu-map=help true",
            "srun --wait 5 --desi-gpu-map=help true",
            "srun --desi=help true",
            "srun --des help true",
            "srun --desi-gpu-ma=help true",
        ] {
            assert!(typed(line, Client::Srun), "{line}");
        }
        for line in [
            "sbatch --wrap true --desi-gpu-map=help",
            "sbatch -W --desi-gpu-map=help job.sh",
            "salloc -N 1 --desi-gpu-map help bash",
        ] {
            assert!(typed(line, Client::Allocator), "{line}");
        }
    }

    #[test]
    fn the_programs_words_do_not_count() {
        for line in [
            "srun",
            "srun true",
            "srun -w n1 echo --desi-gpu-map-x",
            "srun -w n1 echo --desi-gpu-map=help",
            "srun -n2 true --desi-gpu-map=help",
            "srun -l true --desi-gpu-map=help",
            "srun -- --desi-gpu-map=help",
            "srun -n2 -- true --desi-gpu-map=help",
            "srun - --desi-gpu-map=help",
            // The option is the value of the option before it.
            "srun -J --desi-gpu-map=help true",
            "srun -lJ --desi-gpu-map=help true",
            "srun --comment --desi-gpu-map=help true",
            "srun --exclusive true --desi-gpu-map=help",
            // Too short to be ours: the clients call these ambiguous.
            "srun --de=help true",
            "srun --d=help true",
            // An abbreviation of another option is not known to take a
            // value: the scan stops at it, on the safe side.
            "srun --nodel n1 --desi-gpu-map=help true",
        ] {
            assert!(!typed(line, Client::Srun), "{line}");
        }
        for line in [
            "sbatch job.sh --desi-gpu-map=help",
            "sbatch -o /dev/null job.sh --desi-gpu-map=help",
            "sbatch --wrap srun_--desi-gpu-map=help",
            // sbatch's -W and --wait take no value: job.sh is the script.
            "sbatch -W job.sh --desi-gpu-map=help",
            "sbatch --wait job.sh --desi-gpu-map=help",
            "salloc -w n1 echo --desi-gpu-map=help",
        ] {
            assert!(!typed(line, Client::Allocator), "{line}");
        }
    }

    #[test]
    fn lists_are_sorted_and_name_each_option_once() {
        let mut names = VALUE_NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names, VALUE_NAMES, "sorted, no repeats");
        assert!(!VALUE_NAMES.contains(&SRUN_VALUE_NAME));
        assert!(!VALUE_LETTERS.contains(SRUN_VALUE_LETTER));
        assert!(!VALUE_NAMES.iter().any(|n| n.starts_with("des")));
        let (letters, names) = value_options(Client::Srun);
        assert!(letters.ends_with('W') && names.contains(&"wait"));
        let (letters, names) = value_options(Client::Allocator);
        assert!(!letters.contains('W') && !names.contains(&"wait"));
    }
}
