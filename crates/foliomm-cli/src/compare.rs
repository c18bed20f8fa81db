//! `foliomm compare`: one scenario on the model and on the host kernel, with
//! every observation set side by side. Frame identity is compared as a
//! relation (the same frame as an earlier observation, or a new one), never
//! as raw numbers; fields the kernel does not expose are left out.

use foliomm_scenario::interp::StepOutcome;
use foliomm_scenario::{Observation, Outcome};

/// How a step's observed frame relates to earlier observations of the run.
/// A frame freed and allocated again in between (the model tells by its
/// generation; a kernel cannot) is a new frame. An observation made
/// `except frame` neither has a relation nor is one's reference.
fn frame_relations(steps: &[StepOutcome]) -> Vec<Option<String>> {
    let mut seen: Vec<((u64, u32), usize)> = Vec::new();
    steps
        .iter()
        .map(|s| {
            // `except frame` leaves the frame out of the relations too.
            let o = s.observed.filter(|o| !o.via_gup && o.recorded("frame"))?;
            Some(if !o.page.present {
                "absent".to_string()
            } else if let Some((_, line)) = seen.iter().find(|(f, _)| *f == (o.page.pfn, o.page.generation)) {
                format!("frame of line {line}")
            } else {
                seen.push(((o.page.pfn, o.page.generation), s.line));
                "new frame".to_string()
            })
        })
        .collect()
}

fn describe(o: &Observation, rel: &str) -> String {
    format!(
        "{rel}, order {}, {}{}{}rss {}K thp {}K",
        o.page.folio_order,
        if o.page.exclusive { "excl " } else { "" },
        if o.page.pmd_mapped { "pmd " } else { "" },
        if o.page.zero_page { "zero " } else { "" },
        o.range.rss_kb,
        o.range.anon_huge_kb
    )
}

/// Why the host's sharing fields of a 1 GiB hugetlb page are no referee.
const PUD_SHARING: &str = "for a 1 GiB page Linux's pagemap and smaps also test hugetlb_pmd_shared() on the PUD \
table, whose pt_share_count no constructor sets";

/// Whether field `f` of a present 1 GiB hugetlb page (order 18 on both
/// sides) is one the host may misreport: pagemap_hugetlb_range (and
/// smaps_hugetlb_range) call hugetlb_pmd_shared() for every huge page
/// size, and for a PUD entry that
/// reads `pt_share_count` of a PUD table (which aliases a field left from
/// the page's earlier use), so an exclusive page can read as shared.
fn unreliable_on_host(f: &str, mo: &Observation, ho: &Observation) -> bool {
    const PUD_ORDER: u32 = 18;
    let gigantic = |o: &Observation| o.page.present && o.page.folio_order == PUD_ORDER;
    let sharing = ["exclusive", "shared_kb", "private_kb", "vma_shared_hugetlb_kb", "vma_private_hugetlb_kb"];
    sharing.contains(&f) && gigantic(mo) && gigantic(ho)
}

/// The mismatches and the notes (fields left uncompared, and why) between
/// a model observation and a kernel's, given how each one's frame relates
/// to the run's earlier observations.
fn observation_differences(
    mo: &Observation,
    ho: &Observation,
    (mrel, hrel): (&Option<String>, &Option<String>),
) -> (Vec<String>, Vec<String>) {
    let (mut diffs, mut notes) = (Vec::new(), Vec::new());
    // Through a GUP reference the kernel shows only the bytes.
    let fields: Vec<&str> = match mo.via_gup || ho.via_gup {
        true => vec!["byte"],
        false => Observation::compared_fields().copied().collect(),
    };
    for f in fields.iter().filter(|f| mo.knows(f) && ho.knows(f)) {
        let (a, b) = (mo.field(f), ho.field(f));
        if a != b && unreliable_on_host(f, mo, ho) {
            notes.push(format!("{f}: model {}, host {} (not compared: {PUD_SHARING})", a.unwrap_or(0), b.unwrap_or(0)));
        } else if a != b {
            diffs.push(format!("{f}: model {}, host {}", a.unwrap_or(0), b.unwrap_or(0)));
        }
    }
    if mrel != hrel && !(mo.via_gup || ho.via_gup) && mo.knows("frame") && ho.knows("frame") {
        let show = |r: &Option<String>| r.clone().unwrap_or_else(|| "-".into());
        diffs.push(format!("frame: model {}, host {}", show(mrel), show(hrel)));
    }
    (diffs, notes)
}

/// How the two runs ended, when not alike (one failed, or both at
/// different lines, with different errnos or, without errnos, different
/// messages; the model's hints after an errno do not count): each side's
/// words.
fn failure_difference(model: &Outcome, host: &Outcome) -> Option<(String, String)> {
    let show = |f: &Option<foliomm_scenario::interp::Failure>| {
        f.as_ref().map_or("passed".to_string(), |f| format!("failed at line {}: {}", f.line, f.message))
    };
    let errno = |f: &foliomm_scenario::interp::Failure| {
        let word = f.message.split("failed with ").nth(1)?.split(|c: char| !c.is_ascii_alphanumeric()).next()?;
        word.starts_with('E').then(|| (f.line, word.to_string()))
    };
    if let (Some(m), Some(h)) = (&model.failure, &host.failure) {
        if errno(m).is_some() && errno(m) == errno(h) {
            return None;
        }
    }
    let (m, h) = (show(&model.failure), show(&host.failure));
    (m != h).then_some((m, h))
}

/// The steps both runs made, as (model index, host index): the same line,
/// in order (a repeated block runs a line more than once).
fn paired_steps(model: &Outcome, host: &Outcome) -> Vec<(usize, usize)> {
    let mut pairs = Vec::new();
    let mut hi = 0;
    for (mi, ms) in model.steps.iter().enumerate() {
        if let Some(hpos) = host.steps[hi..].iter().position(|h| h.line == ms.line) {
            hi += hpos;
            pairs.push((mi, hi));
        }
    }
    pairs
}

/// Every mismatch between a model run and a kernel run of one scenario,
/// as `line N: what` (the failures' difference as line 0); empty when
/// they agree.
pub fn differences(model: &Outcome, host: &Outcome) -> Vec<String> {
    let (mr, hr) = (frame_relations(&model.steps), frame_relations(&host.steps));
    let mut out = Vec::new();
    for (mi, hi) in paired_steps(model, host) {
        let ms = &model.steps[mi];
        if let (Some(mo), Some(ho)) = (&ms.observed, &host.steps[hi].observed) {
            let (diffs, _) = observation_differences(mo, ho, (&mr[mi], &hr[hi]));
            out.extend(diffs.into_iter().map(|d| format!("line {}: {d}", ms.line)));
        }
    }
    if let Some((m, h)) = failure_difference(model, host) {
        out.push(format!("line 0: model {m}; host {h}"));
    }
    out
}

/// Prints the comparison; returns the number of mismatches.
pub fn report(file: &str, model: &Outcome, host: &Outcome, quiet: bool) -> usize {
    println!("== {file}");
    let (mr, hr) = (frame_relations(&model.steps), frame_relations(&host.steps));
    let mut mismatches = 0;
    for (mi, hi) in paired_steps(model, host) {
        let (ms, hs) = (&model.steps[mi], &host.steps[hi]);
        let (mut diffs, mut notes) = (Vec::new(), Vec::new());
        if let (Some(mo), Some(ho)) = (&ms.observed, &hs.observed) {
            (diffs, notes) = observation_differences(mo, ho, (&mr[mi], &hr[hi]));
            if !quiet || !diffs.is_empty() {
                let mark = if diffs.is_empty() { " " } else { "✗" };
                println!("{mark} {:>4}  {}", ms.line, ms.text);
                println!("        model: {}", describe(mo, mr[mi].as_deref().unwrap_or("")));
                println!("        host:  {}", describe(ho, hr[hi].as_deref().unwrap_or("")));
            }
        }
        for d in &diffs {
            println!("        mismatch: {d}");
        }
        for n in &notes {
            println!("        note: {n}");
        }
        mismatches += diffs.len();
    }
    for m in &model.measures {
        if let Some(h) = host.measures.iter().find(|h| h.name == m.name) {
            println!(
                "  measure {}: model {:.6} s, host {:.6} s, model/host {:.2}x",
                m.name,
                m.seconds,
                h.seconds,
                m.seconds / h.seconds
            );
        }
    }
    if let Some((m, h)) = failure_difference(model, host) {
        println!("  model {m}");
        println!("  host  {h}");
        mismatches += 1;
    }
    println!("  {}", if mismatches == 0 { "no mismatches".to_string() } else { format!("{mismatches} mismatches") });
    mismatches
}

#[cfg(test)]
mod tests {
    use super::failure_difference;
    use foliomm_scenario::interp::{Failure, FailureKind};
    use foliomm_scenario::Outcome;

    fn failed(line: usize, message: &str) -> Outcome {
        let failure = Some(Failure { line, kind: FailureKind::Scenario, message: message.into() });
        Outcome { failure, ..Outcome::default() }
    }

    /// The same errno at the same line agrees whatever the model adds to
    /// it; another errno, another line or no errno at all does not.
    #[test]
    fn failures_agree_by_line_and_errno() {
        let model = failed(58, "failed with ENOMEM: out of memory (the model's RAM is the default 4G: ...)");
        assert_eq!(failure_difference(&model, &failed(58, "failed with ENOMEM: out of memory")), None);
        assert!(failure_difference(&model, &failed(58, "failed with EFAULT: bad address")).is_some());
        assert!(failure_difference(&model, &failed(57, "failed with ENOMEM: out of memory")).is_some());
        assert!(failure_difference(&model, &Outcome::default()).is_some());
        let expect = failed(9, "expectation failed: x.byte (= 1) == 2");
        assert!(failure_difference(&expect, &failed(9, "expectation failed: x.byte (= 3) == 2")).is_some());
    }
}
