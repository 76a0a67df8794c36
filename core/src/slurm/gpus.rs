//! GPU lists as Slurm writes them into `CUDA_VISIBLE_DEVICES` and its kin.
//!
//! Entries are opaque tokens: indices (`3`), sub-device indices (`0.1`,
//! Level Zero), `GPU-...` and `MIG-...` UUIDs. They are kept exactly as given
//! (less surrounding spaces) and never renumbered. One list names its GPUs
//! one way: indices and UUIDs together are refused.

use crate::error::{Error, ListProblem};

/// More entries than any node holds: a longer list is garbage, not a node.
pub const MAX_LIST_ENTRIES: usize = 1024;
/// Longest accepted token (a MIG id is about 60 characters).
const MAX_TOKEN: usize = 128;

/// Parses a comma-separated GPU list. Rejects what Slurm never writes and
/// CUDA would misread: empty lists or entries, `NoDevFiles`, duplicates,
/// odd characters, indices beside UUIDs, and lists longer than
/// [`MAX_LIST_ENTRIES`].
pub fn parse_gpu_list(value: &str) -> Result<Vec<String>, Error> {
    let bad = |why| Error::BadGpuList {
        list: value.to_string(),
        why,
    };
    if value.trim().is_empty() {
        return Err(bad(ListProblem::Empty));
    }
    let count = value.split(',').count();
    if count > MAX_LIST_ENTRIES {
        return Err(bad(too_long(count)));
    }
    let mut gpus: Vec<String> = Vec::with_capacity(count);
    for token in value.split(',').map(str::trim) {
        if token.eq_ignore_ascii_case("NoDevFiles") {
            return Err(bad(ListProblem::NoDevFiles));
        }
        check_token(token).map_err(bad)?;
        if gpus.iter().any(|g| g == token) {
            return Err(bad(ListProblem::Twice(token.to_string())));
        }
        gpus.push(token.to_string());
    }
    one_way(&gpus).map_err(bad)?;
    Ok(gpus)
}

/// Checks a list that arrives as separate entries (NVML's UUIDs) by the
/// same rules as [`parse_gpu_list`]: a library returning `GPU-x,100` or the
/// same UUID twice must not give a task two devices, or every task one.
pub(crate) fn check_list(gpus: &[String]) -> Result<(), Error> {
    let bad = |why| Error::BadGpuList {
        list: join(gpus),
        why,
    };
    if gpus.len() > MAX_LIST_ENTRIES {
        return Err(bad(too_long(gpus.len())));
    }
    for (i, token) in gpus.iter().enumerate() {
        check_token(token).map_err(bad)?;
        if gpus.iter().take(i).any(|g| g == token) {
            return Err(bad(ListProblem::Twice(token.clone())));
        }
    }
    one_way(gpus).map_err(bad)
}

/// A list names its GPUs by index or by UUID, never both.
fn one_way(gpus: &[String]) -> Result<(), ListProblem> {
    let index = gpus.iter().find(|t| !is_uuid(t));
    let uuid = gpus.iter().find(|t| is_uuid(t));
    match (index, uuid) {
        (Some(index), Some(uuid)) => Err(ListProblem::Mixed {
            index: index.clone(),
            uuid: uuid.clone(),
        }),
        _ => Ok(()),
    }
}

fn too_long(entries: usize) -> ListProblem {
    ListProblem::TooLong {
        entries,
        most: MAX_LIST_ENTRIES,
    }
}

/// Accepts an index, `INDEX.SUBDEVICE`, or a `GPU-`/`MIG-` UUID.
fn check_token(token: &str) -> Result<(), ListProblem> {
    if token.is_empty() {
        return Err(ListProblem::EmptyEntry);
    }
    if token.len() > MAX_TOKEN {
        return Err(ListProblem::LongEntry { most: MAX_TOKEN });
    }
    if is_device_index(token) || is_uuid(token) {
        Ok(())
    } else {
        Err(ListProblem::BadEntry(token.to_string()))
    }
}

fn is_device_index(token: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    match token.split_once('.') {
        Some((device, sub)) => digits(device) && digits(sub),
        None => digits(token),
    }
}

pub(crate) fn is_uuid(token: &str) -> bool {
    let body = token
        .strip_prefix("GPU-")
        .or_else(|| token.strip_prefix("MIG-"));
    body.is_some_and(|b| {
        !b.is_empty()
            && b.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'/' | b':' | b'.' | b'_'))
    })
}

/// Joins a list back into the form the variables use.
pub fn join<S: AsRef<str>>(gpus: &[S]) -> String {
    let parts: Vec<&str> = gpus.iter().map(AsRef::as_ref).collect();
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(value: &str) -> Vec<String> {
        parse_gpu_list(value).unwrap_or_else(|e| panic!("{value}: {e}"))
    }

    #[test]
    fn plain_lists() {
        assert_eq!(ok("0"), ["0"]);
        assert_eq!(ok("0,1,2,3"), ["0", "1", "2", "3"]);
        assert_eq!(ok("2,3"), ["2", "3"]);
        assert_eq!(ok("3,1"), ["3", "1"], "order is kept");
        assert_eq!(
            ok(" 0 , 1 "),
            ["0", "1"],
            "spaces round entries are dropped"
        );
        assert_eq!(ok("0.0,0.1"), ["0.0", "0.1"]);
    }

    #[test]
    fn uuids_and_mig_ids() {
        let gpu = "GPU-8b3c0f2e-5d0a-4f6e-9a59-0c1d2e3f4a5b";
        let mig = "MIG-2ba5c1c4-7e41-5f0d-9d1b-3c1a8f9e0b6d";
        let old_mig = "MIG-GPU-8b3c0f2e-5d0a-4f6e-9a59-0c1d2e3f4a5b/1/0";
        assert_eq!(ok(gpu), [gpu]);
        assert_eq!(ok(&format!("{gpu},{mig}")), [gpu, mig]);
        assert_eq!(ok(old_mig), [old_mig]);
        assert_eq!(
            ok("GPU-fake-n1-0,GPU-fake-n1-1"),
            ["GPU-fake-n1-0", "GPU-fake-n1-1"]
        );
    }

    /// Why `value` is refused; the error names the whole list.
    fn problem(value: &str) -> ListProblem {
        match parse_gpu_list(value) {
            Err(Error::BadGpuList { list, why }) if list == value => why,
            other => panic!("{value:?}: {other:?}"),
        }
    }

    #[test]
    fn odd_input_is_an_error_that_names_it() {
        let entry = |t: &str| ListProblem::BadEntry(t.to_string());
        let mixed = |index: &str, uuid: &str| ListProblem::Mixed {
            index: index.to_string(),
            uuid: uuid.to_string(),
        };
        let cases = [
            ("", ListProblem::Empty),
            ("   ", ListProblem::Empty),
            ("0,,1", ListProblem::EmptyEntry),
            ("0,1,", ListProblem::EmptyEntry),
            (",0", ListProblem::EmptyEntry),
            ("0,1,0", ListProblem::Twice("0".to_string())),
            ("NoDevFiles", ListProblem::NoDevFiles),
            ("nodevfiles", ListProblem::NoDevFiles),
            ("-1", entry("-1")),
            ("0 1", entry("0 1")),
            ("GPU-", entry("GPU-")),
            ("gpu0", entry("gpu0")),
            ("0;1", entry("0;1")),
            ("1.2.3", entry("1.2.3")),
            ("GPU-a b", entry("GPU-a b")),
            ("\u{fffd}", entry("\u{fffd}")),
            ("0,GPU-a", mixed("0", "GPU-a")),
            ("GPU-a,MIG-b,1.0", mixed("1.0", "GPU-a")),
        ];
        for (value, want) in cases {
            assert_eq!(problem(value), want, "{value:?}");
        }
        let long = format!("GPU-{}", "a".repeat(200));
        assert_eq!(problem(&long), ListProblem::LongEntry { most: MAX_TOKEN });
    }

    #[test]
    fn each_cause_in_words() {
        for (value, want) in [
            ("", "GPU list \"\" is empty"),
            (
                "0,,1",
                "GPU list \"0,,1\" has an empty entry; entries must be indices (3, or 0.1) \
                 or GPU-/MIG- UUIDs",
            ),
            ("0,1,0", "GPU list \"0,1,0\" names \"0\" twice"),
            (
                "NoDevFiles",
                "GPU list \"NoDevFiles\" says NoDevFiles: Slurm found no device files for the GPUs",
            ),
            (
                "gpu0",
                "GPU list \"gpu0\" has the entry \"gpu0\"; entries must be indices (3, or 0.1) \
                 or GPU-/MIG- UUIDs",
            ),
            (
                "2,GPU-fake-n1-3",
                "GPU list \"2,GPU-fake-n1-3\" mixes indices and UUIDs (\"2\" and \
                 \"GPU-fake-n1-3\"); a list must name every GPU one way",
            ),
        ] {
            assert_eq!(parse_gpu_list(value).unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn thousands_of_entries_are_refused() {
        let many: Vec<String> = (0..5000).map(|i| i.to_string()).collect();
        assert_eq!(
            problem(&many.join(",")),
            ListProblem::TooLong {
                entries: 5000,
                most: MAX_LIST_ENTRIES
            }
        );
        let err = parse_gpu_list(&many.join(",")).unwrap_err().to_string();
        assert!(
            err.contains("has 5000 entries, more than the 1024"),
            "{err}"
        );
        assert!(err.len() < 300);
        let fine: Vec<String> = (0..MAX_LIST_ENTRIES).map(|i| i.to_string()).collect();
        assert_eq!(ok(&fine.join(",")).len(), MAX_LIST_ENTRIES);
    }

    #[test]
    fn separate_entries_follow_the_same_rules() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(check_list(&list(&["GPU-a", "GPU-b"])).is_ok());
        assert!(check_list(&[]).is_ok());
        for (bad, want) in [
            (
                list(&["GPU-x,100"]),
                ListProblem::BadEntry("GPU-x,100".into()),
            ),
            (
                list(&["GPU-a", "GPU-a"]),
                ListProblem::Twice("GPU-a".into()),
            ),
            (list(&["GPU-a", ""]), ListProblem::EmptyEntry),
            (
                list(&["GPU-a", "3"]),
                ListProblem::Mixed {
                    index: "3".into(),
                    uuid: "GPU-a".into(),
                },
            ),
            (list(&["GPU-a b"]), ListProblem::BadEntry("GPU-a b".into())),
        ] {
            match check_list(&bad) {
                Err(Error::BadGpuList { list, why }) => {
                    assert_eq!(list, join(&bad));
                    assert_eq!(why, want);
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn join_round_trips() {
        assert_eq!(join(&ok("2,3")), "2,3");
        assert_eq!(join::<&str>(&[]), "");
    }
}
