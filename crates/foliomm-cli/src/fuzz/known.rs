//! The known differences between the model and a kernel
//! (`known-differences.txt`, and files given with `--known`), each with its
//! reason: a fuzz finding they explain is not counted.

use std::path::PathBuf;

use foliomm::internals::release::KernelVersion;

/// Differences foliomm knows and accepts (`known-differences.txt`, and
/// files given with `--known`), each with its reason: a finding whose every
/// difference matches one is [`Class::Known`].
pub struct Known {
    entries: Vec<KnownDifference>,
    /// The referee's release, which an entry may be limited to.
    release: Option<KernelVersion>,
}

struct KnownDifference {
    when: String,
    kernel: Option<KernelVersion>,
    why: String,
}

impl Known {
    /// The shipped list and the files `extra`, for a referee of `release`.
    pub(super) fn load(extra: &[PathBuf], release: Option<KernelVersion>) -> anyhow::Result<Known> {
        let mut entries = parse_known(include_str!("known-differences.txt"), "known-differences.txt")?;
        for f in extra {
            let text = std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
            entries.extend(parse_known(&text, &f.display().to_string())?);
        }
        Ok(Known { entries, release })
    }

    /// The reason a difference is known, if it is.
    pub(super) fn why(&self, diff: &str) -> Option<&str> {
        let applies = |e: &&KnownDifference| e.kernel.is_none_or(|k| Some(k) == self.release);
        self.entries.iter().filter(applies).find(|e| diff.contains(&e.when)).map(|e| e.why.as_str())
    }
}

/// The entries of a known-differences file (see `known-differences.txt`).
fn parse_known(text: &str, file: &str) -> anyhow::Result<Vec<KnownDifference>> {
    let mut out: Vec<KnownDifference> = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#')) {
        let bad = |what: &str| anyhow::anyhow!("{file}, line {}: {what}", n + 1);
        let (key, value) = line.split_once(':').ok_or_else(|| bad("expected `when:`, `kernel:` or `why:`"))?;
        let value = value.trim().to_string();
        match (key, out.last_mut()) {
            ("when", _) => out.push(KnownDifference { when: value, kernel: None, why: String::new() }),
            ("kernel", Some(e)) => {
                e.kernel = Some(KernelVersion::parse(&value).ok_or_else(|| bad("expected a release such as 6.1"))?)
            }
            ("why", Some(e)) => e.why = format!("{} {value}", e.why).trim().to_string(),
            _ => return Err(bad("expected `when:` first, then `kernel:` or `why:`")),
        }
    }
    match out.iter().find(|e| e.why.is_empty()) {
        Some(e) => Err(anyhow::anyhow!("{file}: the entry for '{}' gives no reason (`why:`)", e.when)),
        None => Ok(out),
    }
}
