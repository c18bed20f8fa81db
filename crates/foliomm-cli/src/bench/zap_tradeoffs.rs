//! `bench zap-batching --tradeoffs`: what seed 001's thread weighed against
//! batching large folios in one mmu_gather, measured on the batched zap.
//! A gather frees its pages in chunks of 512 encoded slots with a
//! reschedule point after each (`tlb_batch_pages_flush`): with 2 MiB
//! folios a chunk is 256 folios, 512 MiB. The thread proposed a page-count
//! cap (`set gather_limit 512`) and noted that `init_on_free` makes freeing
//! cost per byte rather than per folio (`set init_on_free on`); Linux 6.9
//! then counts pages, 512 per chunk, when freeing is that costly. For each
//! folio size: the munmap time under each, its change against plain
//! batching, and the pages freed per reschedule point (the latency the
//! thread worried about).

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
    /// `init_on_free` on the seed's kernel: chunks of 512 slots.
    InitOnFree,
    /// `init_on_free` on 6.9, which frees 512 pages per chunk then.
    InitOnFreeByPages,
}

/// The cap the thread proposed: a reschedule point every 512 pages.
const CAP_PAGES: u64 = 512;

impl Tradeoff {
    pub(super) const ALL: [Tradeoff; 4] =
        [Tradeoff::Plain, Tradeoff::Cap, Tradeoff::InitOnFree, Tradeoff::InitOnFreeByPages];

    /// The series name.
    pub(super) fn name(self) -> &'static str {
        match self {
            Tradeoff::Plain => "batched",
            Tradeoff::Cap => "cap 512 pages",
            Tradeoff::InitOnFree => "init_on_free",
            Tradeoff::InitOnFreeByPages => "init_on_free, 6.9",
        }
    }

    /// `base` (a batched zap) with this trade-off.
    pub(super) fn config(self, base: Config) -> Config {
        match self {
            Tradeoff::Plain => base,
            Tradeoff::Cap => Config { gather_page_limit: Some(CAP_PAGES), ..base },
            Tradeoff::InitOnFree => Config { init_on_free: true, ..base },
            Tradeoff::InitOnFreeByPages => {
                Config { init_on_free: true, kernel: Some(foliomm::KernelVersion::new(6, 9)), ..base }
            }
        }
    }
}

/// The counter this table adds: pages the munmap freed per reschedule point.
pub(super) const PAGES_PER_RESCHED: &str = "pages_per_resched";

/// The reschedule points `m`'s gathers have passed so far (read before and
/// after a munmap).
pub(super) fn resched_points(m: &Arc<Machine>) -> f64 {
    m.stats.zap_resched.load(foliomm::internals::sync::atomic::Ordering::Relaxed) as f64
}

/// Prints the trade-offs table (table `index` of the run), if measured.
pub(super) fn print(run: &SavedRun, index: usize, size: u64) {
    let Some(t) = run.tables.get(index).filter(|t| !t.rows.is_empty()) else { return };
    println!(
        "\nThe batched zap's trade-offs (seed 001's thread): munmap() of {} MiB, mean seconds, change against batched\n\
         with its interval; pages per reschedule point is the work freed between two of them.\n",
        size >> 20
    );
    let mut header = vec!["Folio Size".to_string()];
    for w in Tradeoff::ALL {
        header.push(w.name().to_string());
        if w != Tradeoff::Plain {
            header.push("Change".into());
        }
    }
    header.extend(Tradeoff::ALL.map(|w| format!("pages/resched, {}", w.name())));
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
            let per = t.series(&row.label, w.name()).and_then(|s| s.counter(PAGES_PER_RESCHED));
            cells.push(per.map_or("-".into(), |p| format!("{p:.0}")));
        }
        table.add_row(cells);
    }
    println!("{table}");
}
