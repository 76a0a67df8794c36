//! A grant of GPUs that a front end hands the core as the list itself,
//! where no Slurm step gave them (a Flux job: the GPUs its R gives it), as
//! data: what the rules read of it is its words, never a front end's name.
//! Each front end that grants declares its one [`Grant`] (the Flux
//! plugin's is `crate::flux::GRANT`).

/// How the core speaks of a grant in the lines a user reads.
#[derive(Debug, PartialEq, Eq)]
pub struct Grant {
    /// Who gives the GPUs: `R` (a Flux job's resource set).
    pub giver: &'static str,
    /// What holds them: `this Flux job`.
    pub holder: &'static str,
    /// What MPS's lines call the run: `job`.
    pub noun: &'static str,
    /// A `verbose` line's `source=`: `flux`.
    pub source: &'static str,
    /// How a user gets the tasks' CPUs bound, for `closest`.
    pub cpu_hint: &'static str,
    /// Where the site's settings are, for what names them: `the plugin's
    /// conf`, whose entries read `key = "value"`.
    pub settings: &'static str,
}

impl Grant {
    /// `R's GPUs`.
    pub(crate) fn gpus(&self) -> String {
        format!("{}'s GPUs", self.giver)
    }

    /// `R's`: whose indices the tasks keep.
    pub(crate) fn indices(&self) -> String {
        format!("{}'s", self.giver)
    }

    /// A site's entry, as its settings write it: `vendor = "intel" in the
    /// plugin's conf`.
    pub(crate) fn entry(&self, key: &str, value: &str) -> String {
        format!("{key} = {} in {}", crate::text::quote(value), self.settings)
    }

    /// Why its indices name no GPU where NVML could not locate them:
    /// nothing tells them from renumbered ones.
    pub(crate) fn unlocated(&self) -> String {
        format!(
            "{} gives GPU indices, which NVML's list could not locate",
            self.giver
        )
    }

    /// `R gives this Flux job no GPU on this node`.
    pub(crate) fn none_here(&self) -> String {
        format!("{} gives {} no GPU on this node", self.giver, self.holder)
    }
}
