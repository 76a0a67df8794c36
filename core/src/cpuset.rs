//! Sets of CPU numbers, as Linux and Slurm write them: cpulists
//! (`0-15,64-79`, the kernel's `local_cpulist` and `Cpus_allowed_list`)
//! and hex masks (`0x0000ff`, one task's entry in `SLURM_CPU_BIND_LIST`).

use crate::text::quote;
use std::fmt;

/// The highest CPU count a set may name: Linux's own limit (`NR_CPUS` is
/// at most 8192), so that no text can make a set grow without bound.
pub const MAX_CPUS: usize = 8192;

/// The longest text parsed, so that a message about it stays short and
/// parsing stays cheap.
const MAX_TEXT: usize = 65_536;

const WORD: usize = 64;

/// A set of CPU numbers below [`MAX_CPUS`]. Trailing empty words are never
/// stored, so that equal sets compare equal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CpuSet {
    words: Vec<u64>,
}

/// Why a text is no CPU set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadCpuSet {
    pub(crate) text: String,
    pub(crate) why: &'static str,
}

impl fmt::Display for BadCpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CPU set {} {}; valid forms: a cpulist (0-15,64-79) or a hex mask (0xff00), \
             CPUs below {MAX_CPUS}",
            quote(&self.text),
            self.why
        )
    }
}

impl std::error::Error for BadCpuSet {}

fn bad(text: &str, why: &'static str) -> BadCpuSet {
    BadCpuSet {
        text: text.to_string(),
        why,
    }
}

impl CpuSet {
    pub(crate) fn new() -> CpuSet {
        CpuSet::default()
    }

    /// CPUs `first..=last`; `None` past [`MAX_CPUS`] or when `first > last`.
    pub(crate) fn range(first: usize, last: usize) -> Option<CpuSet> {
        let mut set = CpuSet::new();
        set.insert_range(first, last)?;
        Some(set)
    }

    /// The set whose CPU `w * bits + i` is bit `i` of word `w` (`bits`
    /// wide, at most 64): a kernel or NVML CPU mask. `None` if a CPU past
    /// [`MAX_CPUS`] is set.
    pub fn from_words(words: impl IntoIterator<Item = u64>, bits: u32) -> Option<CpuSet> {
        let bits = bits.min(64);
        let width = usize::try_from(bits).ok()?;
        let cpus: Vec<usize> = words
            .into_iter()
            .enumerate()
            .flat_map(|(w, word)| {
                (0..bits)
                    .filter(move |&b| word >> b & 1 == 1)
                    .map(move |b| w * width + b as usize)
            })
            .collect();
        CpuSet::of(&cpus)
    }

    /// The set of the given CPUs; `None` if one is past [`MAX_CPUS`].
    pub fn of(cpus: &[usize]) -> Option<CpuSet> {
        let mut set = CpuSet::new();
        for &cpu in cpus {
            set.insert_range(cpu, cpu)?;
        }
        Some(set)
    }

    fn insert_range(&mut self, first: usize, last: usize) -> Option<()> {
        if first > last || last >= MAX_CPUS {
            return None;
        }
        let need = last / WORD + 1;
        if self.words.len() < need {
            self.words.resize(need, 0);
        }
        for cpu in first..=last {
            let word = self.words.get_mut(cpu / WORD)?;
            *word |= 1u64 << (cpu % WORD);
        }
        Some(())
    }

    fn trim(mut self) -> CpuSet {
        while self.words.last() == Some(&0) {
            self.words.pop();
        }
        self
    }

    /// Whether the set holds no CPU.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Whether the set holds `cpu`.
    pub fn contains(&self, cpu: usize) -> bool {
        self.words
            .get(cpu / WORD)
            .is_some_and(|w| w & (1u64 << (cpu % WORD)) != 0)
    }

    /// How many CPUs the set holds.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// How many CPUs both sets hold.
    pub fn overlap(&self, other: &CpuSet) -> usize {
        self.words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| (a & b).count_ones() as usize)
            .sum()
    }

    /// Whether every CPU of the set is in `other`, which holds more.
    pub(crate) fn is_strictly_within(&self, other: &CpuSet) -> bool {
        self.overlap(other) == self.len() && self.len() < other.len()
    }

    /// The CPUs either set holds.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let len = self.words.len().max(other.words.len());
        let words = (0..len)
            .map(|i| self.words.get(i).unwrap_or(&0) | other.words.get(i).unwrap_or(&0))
            .collect();
        CpuSet { words }.trim()
    }

    /// The CPUs in increasing order.
    pub fn cpus(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(i, &w)| {
            (0..WORD)
                .filter(move |b| w & (1u64 << b) != 0)
                .map(move |b| i * WORD + b)
        })
    }

    /// The hex mask form, as Slurm writes `SLURM_CPU_BIND_LIST` entries:
    /// `0xff00`; `0x0` for the empty set.
    pub fn to_mask(&self) -> String {
        let mut digits = String::new();
        for word in self.words.iter().rev() {
            if digits.is_empty() {
                digits = format!("{word:x}");
            } else {
                digits += &format!("{word:016x}");
            }
        }
        if digits.is_empty() {
            digits.push('0');
        }
        format!("0x{digits}")
    }

    /// Parses a cpulist (`0-3,8,10-11`), as the kernel writes
    /// `local_cpulist` and `Cpus_allowed_list`. An empty text (or only a
    /// newline) is the empty set.
    pub fn parse_list(text: &str) -> Result<CpuSet, BadCpuSet> {
        if text.len() > MAX_TEXT {
            return Err(bad(text, "is too long"));
        }
        let body = text.trim_end_matches('\n');
        let mut set = CpuSet::new();
        if body.is_empty() {
            return Ok(set);
        }
        for part in body.split(',') {
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (number(text, a)?, number(text, b)?),
                None => {
                    let n = number(text, part)?;
                    (n, n)
                }
            };
            if first > last {
                return Err(bad(text, "has a range whose start is past its end"));
            }
            set.insert_range(first, last)
                .ok_or_else(|| bad(text, "names a CPU past the limit"))?;
        }
        Ok(set.trim())
    }

    /// Parses one hex mask, `0x` optional (`0x3`, `ff00`), lowest CPU in
    /// the last digit: how Slurm writes each task's entry of
    /// `SLURM_CPU_BIND_LIST`.
    pub(crate) fn parse_mask(text: &str) -> Result<CpuSet, BadCpuSet> {
        if text.len() > MAX_TEXT {
            return Err(bad(text, "is too long"));
        }
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .unwrap_or(text);
        if digits.is_empty() {
            return Err(bad(text, "has no hex digits"));
        }
        let mut set = CpuSet::new();
        for (i, c) in digits.chars().rev().enumerate() {
            let value = c
                .to_digit(16)
                .ok_or_else(|| bad(text, "has a character that is not a hex digit"))?;
            for bit in 0..4 {
                if value & (1 << bit) != 0 {
                    let cpu = i * 4 + bit;
                    set.insert_range(cpu, cpu)
                        .ok_or_else(|| bad(text, "names a CPU past the limit"))?;
                }
            }
        }
        Ok(set.trim())
    }

    /// Either form: a mask when it starts with `0x`, a cpulist otherwise.
    pub fn parse(text: &str) -> Result<CpuSet, BadCpuSet> {
        if text.starts_with("0x") || text.starts_with("0X") {
            CpuSet::parse_mask(text)
        } else {
            CpuSet::parse_list(text)
        }
    }
}

/// A decimal CPU number, digits only.
fn number(text: &str, part: &str) -> Result<usize, BadCpuSet> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(text, "has an entry that is not a CPU number or range"));
    }
    part.parse::<usize>()
        .ok()
        .filter(|&n| n < MAX_CPUS)
        .ok_or_else(|| bad(text, "names a CPU past the limit"))
}

/// The cpulist form, ranges joined: `0-15,64-79`; `-` for the empty set.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("-");
        }
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for cpu in self.cpus() {
            match runs.last_mut() {
                Some((_, last)) if *last + 1 == cpu => *last = cpu,
                _ => runs.push((cpu, cpu)),
            }
        }
        let parts: Vec<String> = runs
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn cpulists_parse_and_print() {
        let s = CpuSet::parse_list("0-15,64-79\n").unwrap();
        assert_eq!(s.len(), 32);
        assert!(s.contains(0) && s.contains(15) && s.contains(64) && !s.contains(16));
        assert_eq!(s.to_string(), "0-15,64-79");
        assert_eq!(CpuSet::parse_list("3").unwrap().to_string(), "3");
        assert_eq!(CpuSet::parse_list("1,2,3,5").unwrap().to_string(), "1-3,5");
        assert_eq!(CpuSet::parse_list("").unwrap(), CpuSet::new());
        assert_eq!(CpuSet::parse_list("\n").unwrap().to_string(), "-");
        assert_eq!(CpuSet::parse_list("8191").unwrap().len(), 1);
    }

    #[test]
    fn masks_parse_as_slurm_writes_them() {
        assert_eq!(CpuSet::parse_mask("0x3").unwrap().to_string(), "0-1");
        let words = CpuSet::from_words([0b101, 0, 1 << 63], 64).unwrap();
        assert_eq!(words.to_string(), "0,2,191");
        assert_eq!(
            CpuSet::from_words([0b11, 0b1], 32).unwrap().to_string(),
            "0-1,32"
        );
        assert_eq!(
            CpuSet::from_words(vec![0; 200].into_iter().chain([1]), 64),
            None
        );
        assert_eq!(CpuSet::parse_mask("0x0000F0").unwrap().to_string(), "4-7");
        assert_eq!(CpuSet::parse_mask("ff00").unwrap().to_string(), "8-15");
        assert_eq!(
            CpuSet::parse("0x10000000000000001").unwrap().to_string(),
            "0,64"
        );
        assert_eq!(CpuSet::parse("0x000").unwrap(), CpuSet::new());
        assert_eq!(CpuSet::parse("4-5").unwrap().to_string(), "4-5");
        assert_eq!(
            CpuSet::parse("8-15,64").unwrap().to_mask(),
            "0x1000000000000ff00"
        );
        assert_eq!(CpuSet::new().to_mask(), "0x0");
    }

    #[test]
    fn bad_texts_are_errors_that_name_them() {
        for text in [
            "a", "1-", "-1", "3-1", "1,,2", "1 2", "8192", "0-99999", "x0", "0x", "0xg", " 1",
            "1-2-3",
        ] {
            let err = CpuSet::parse(text).expect_err(text);
            assert!(err.to_string().contains(&quote(text)), "{err}");
        }
        let err = CpuSet::parse_list("1-x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "CPU set \"1-x\" has an entry that is not a CPU number or range; valid forms: \
             a cpulist (0-15,64-79) or a hex mask (0xff00), CPUs below 8192"
        );
        let huge = format!("0x{}", "f".repeat(3000));
        assert!(CpuSet::parse(&huge).is_err());
        assert!(CpuSet::parse(&"1,".repeat(40_000)).is_err());
    }

    #[test]
    fn overlap_and_union() {
        let a = CpuSet::parse("0-7").unwrap();
        let b = CpuSet::parse("4-11,100").unwrap();
        assert_eq!(a.overlap(&b), 4);
        assert_eq!(b.overlap(&a), 4);
        assert_eq!(a.union(&b).to_string(), "0-11,100");
        let within = |x: &str, y: &str| {
            CpuSet::parse(x)
                .unwrap()
                .is_strictly_within(&CpuSet::parse(y).unwrap())
        };
        assert!(within("4-5", "0-7"));
        assert!(!within("0-7", "0-7"), "equal");
        assert!(!within("6-8", "0-7"), "outside");
        assert!(!within("0-1", "0,2-7"), "disjoint but smaller");
        assert_eq!(CpuSet::range(2, 1), None);
        assert_eq!(CpuSet::of(&[9000]), None);
    }

    proptest! {
        #[test]
        fn printing_then_parsing_gives_the_set(cpus in proptest::collection::vec(0usize..MAX_CPUS, 0..64)) {
            let set = CpuSet::of(&cpus).unwrap();
            let back = if set.is_empty() { CpuSet::new() } else { CpuSet::parse_list(&set.to_string()).unwrap() };
            prop_assert_eq!(&back, &set);
            let mut distinct = cpus.clone();
            distinct.sort_unstable();
            distinct.dedup();
            prop_assert_eq!(set.len(), distinct.len());
            prop_assert_eq!(set.cpus().collect::<Vec<_>>(), distinct);
            prop_assert_eq!(CpuSet::parse_mask(&set.to_mask()).unwrap(), set);
        }

        #[test]
        fn any_text_parses_or_errs(text in ".{0,40}") {
            let _ = CpuSet::parse(&text);
        }
    }
}
