//! `bench zap-batching --tradeoffs`: what seed 001's thread weighed against
//! batching large folios in one mmu_gather, measured on the batched zap.
//! A full gather of 2 MiB folios holds ~5,000 entries, about 10 GiB, freed
//! between two reschedule points (`tlb_batch_pages_flush`); the thread
//! proposed a page-count cap (`cond_resched` every 512 pages, `set
//! gather_limit 512`) and noted that `init_on_free` makes freeing cost per
//! byte rather than per folio (`set init_on_free on`). For each folio size:
//! the munmap time under each, its change against plain batching, and the
//! pages freed per flush (the work between reschedule points: its latency).

use std::sync::Arc;

use foliomm::{Config, Machine};

use super::new_table;
use super::saved::SavedRun;
use super::stats::{change, summarize};

/// One way to run the batched zap.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Tradeoff {
    Plain,
    Cap,
    InitOnFree,
}

/// The cap the thread proposed: a reschedule point every 512 pages.
const CAP_PAGES: u64 = 512;

impl Tradeoff {
    pub(super) const ALL: [Tradeoff; 3] = [Tradeoff::Plain, Tradeoff::Cap, Tradeoff::InitOnFree];

    /// The series name.
    pub(super) fn name(self) -> &'static str {
        match self {
            Tradeoff::Plain => "batched",
            Tradeoff::Cap => "cap 512 pages",
            Tradeoff::InitOnFree => "init_on_free",
        }
    }

    /// `base` (a batched zap) with this trade-off.
    pub(super) fn config(self, base: Config) -> Config {
        match self {
            Tradeoff::Plain => base,
            Tradeoff::Cap => Config { gather_page_limit: Some(CAP_PAGES), ..base },
            Tradeoff::InitOnFree => Config { init_on_free: true, ..base },
        }
    }
}

/// The counter this table adds: pages freed per TLB flush of the munmap.
pub(super) const PAGES_PER_FLUSH: &str = "pages_per_flush";

/// The flushes `m` has requested so far (read before and after a munmap).
pub(super) fn flushes(m: &Arc<Machine>) -> f64 {
    m.stats.tlb_flush.load(foliomm::internals::sync::atomic::Ordering::Relaxed) as f64
}

/// Prints the trade-offs table (table `index` of the run), if measured.
pub(super) fn print(run: &SavedRun, index: usize, size: u64) {
    let Some(t) = run.tables.get(index).filter(|t| !t.rows.is_empty()) else { return };
    println!(
        "\nThe batched zap's trade-offs (seed 001's thread): munmap() of {} MiB, mean seconds, change against batched\n\
         with its interval; pages freed per flush is the work between two reschedule points.\n",
        size >> 20
    );
    let mut header = vec!["Folio Size".to_string()];
    for w in Tradeoff::ALL {
        header.push(w.name().to_string());
        if w != Tradeoff::Plain {
            header.push("Change".into());
        }
    }
    header.extend(Tradeoff::ALL.map(|w| format!("pages/flush, {}", w.name())));
    let mut table = new_table(header);
    for row in &t.rows {
        let samples = |w: Tradeoff| t.samples(&row.label, w.name()).unwrap_or_default().to_vec();
        let base = samples(Tradeoff::Plain);
        if base.is_empty() {
            continue;
        }
        let mut cells = vec![row.label.clone()];
        for w in Tradeoff::ALL {
            let s = samples(w);
            cells.push(if s.is_empty() { "-".into() } else { format!("{:.6}", summarize(&s).mean) });
            if w != Tradeoff::Plain {
                let family = t.rows.len() * 2;
                cells.push(if s.is_empty() { "-".into() } else { change(&base, &s, family).to_string() });
            }
        }
        for w in Tradeoff::ALL {
            let per = t.series(&row.label, w.name()).and_then(|s| s.counter(PAGES_PER_FLUSH));
            cells.push(per.map_or("-".into(), |p| format!("{p:.0}")));
        }
        table.add_row(cells);
    }
    println!("{table}");
}
