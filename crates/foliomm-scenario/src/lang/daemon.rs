//! The kernel threads a scenario runs for whole scans (`khugepaged N`,
//! `ksmd N`).

/// A kernel thread a scenario runs for whole scans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Daemon {
    /// khugepaged: collapses ranges into PMD-mapped THPs.
    Khugepaged,
    /// ksmd: merges equal pages of `MADV_MERGEABLE` ranges.
    Ksmd,
}

impl Daemon {
    /// The daemon named `name` as a scenario writes it.
    pub fn parse(name: &str) -> Option<Daemon> {
        match name {
            "khugepaged" => Some(Daemon::Khugepaged),
            "ksmd" => Some(Daemon::Ksmd),
            _ => None,
        }
    }
}
