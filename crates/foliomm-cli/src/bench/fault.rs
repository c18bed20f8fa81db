//! `foliomm bench fault`: fault and munmap with 4K pages, 64K mTHP and 2M
//! THP, model against host kernel, memset as the zeroing baseline.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use foliomm::{Design, Machine};

use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::stats::summarize;
use super::{host_share_note, model_populate, new_table, secs, warm_machine_for, CommonArgs};
use crate::host;

/// The folio sizes: name and order.
const SIZES: [(&str, u32); 3] = [("4K", 0), ("64K", 4), ("2M", 9)];

/// One configuration: a folio size (an index into [`SIZES`]) on the model
/// or the host kernel, or memset into fresh memory, into warm memory at
/// once, or into warm memory 2 MiB at a time.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Setup {
    Model(usize),
    Host(usize),
    Memset { warm: bool, pieces: bool },
}

/// The memset baselines: series name and setup.
const MEMSETS: [(&str, Setup); 3] = [
    ("fresh", Setup::Memset { warm: false, pieces: false }),
    ("warm", Setup::Memset { warm: true, pieces: false }),
    ("warm-2M", Setup::Memset { warm: true, pieces: true }),
];

/// `bench fault`: the common options, the region's size.
pub(super) struct Fault<'a> {
    args: &'a CommonArgs,
    size: u64,
    /// The machine of the folio size under way: after the warm-up its
    /// frames are warm host memory, so the samples measure the model's own
    /// work.
    machine: Option<Arc<Machine>>,
}

impl<'a> Fault<'a> {
    pub(super) fn new(args: &'a CommonArgs) -> Result<Fault<'a>> {
        Ok(Fault { args, size: args.size_or("1G")?, machine: None })
    }
}

impl Benchmark for Fault<'_> {
    type Config = Setup;
    const NAME: &'static str = "fault";

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "size": self.size })
    }

    fn tables(&self) -> Vec<Table> {
        let mib = self.size >> 20;
        ["fault, one write per page", "munmap", "memset"]
            .map(|what| Table {
                name: format!("{what} of {mib} MiB"),
                unit: "s".into(),
                higher_is_better: false,
                rows: Vec::new(),
            })
            .into()
    }

    fn plan(&self, host: bool) -> Vec<Vec<Setup>> {
        let sizes =
            (0..SIZES.len()).map(|i| std::iter::once(Setup::Model(i)).chain(host.then_some(Setup::Host(i))).collect());
        sizes.chain([MEMSETS.map(|(_, s)| s).to_vec()]).collect()
    }

    fn prepare(&mut self, group: &[Setup], _: &super::progress::Progress) -> Result<()> {
        self.machine = None;
        if matches!(group[0], Setup::Model(_)) {
            self.machine = Some(warm_machine_for(self.size, self.args.config(Design::MmId))?);
        }
        Ok(())
    }

    fn place(&self, c: &Setup) -> (String, String) {
        let (row, series) = match *c {
            Setup::Model(i) => (SIZES[i].0, "model"),
            Setup::Host(i) => (SIZES[i].0, "host"),
            Setup::Memset { .. } => ("memset", MEMSETS.iter().find(|(_, s)| s == c).expect("a memset").0),
        };
        (row.into(), series.into())
    }

    fn on_host(&self, c: &Setup) -> bool {
        matches!(c, Setup::Host(_))
    }

    fn measure(&mut self, c: &Setup) -> Result<Measurement> {
        let size = self.size;
        match *c {
            Setup::Model(i) => {
                let m = self.machine.as_ref().expect("prepared");
                let (mm, addr, fault) = model_populate(m, &mut m.new_cpu(), size, SIZES[i].1)?;
                let t = Instant::now();
                mm.munmap(addr, size)?;
                Ok(Measurement::of([secs(fault), secs(t.elapsed())]))
            }
            Setup::Host(i) => {
                let (fault, unmap, share) = host::fault_munmap(size as usize, SIZES[i].1, false)?;
                let notes = host_share_note(SIZES[i].0, share).into_iter().collect();
                Ok(Measurement { notes, ..Measurement::of([secs(fault), secs(unmap)]) })
            }
            Setup::Memset { warm, pieces } => {
                let piece = if pieces { 2 << 20 } else { size as usize };
                let t =
                    if warm { host::memset_warm(size as usize, piece)? } else { host::memset_fresh(size as usize)? };
                Ok(Measurement { samples: vec![(2, secs(t))], ..Measurement::default() })
            }
        }
    }

    fn print(&self, run: &SavedRun) {
        print_table(run, self.size);
    }
}

/// The table: each folio size's fault and munmap, model against host, and
/// the model's time per page; then memset (fresh, warm) as the baseline.
fn print_table(run: &SavedRun, size: u64) {
    let [fault, munmap, memset] = [0, 1, 2].map(|t| &run.tables[t]);
    let mean = |t: &Table, row: &str, series: &str| t.samples(row, series).map(|s| summarize(s).mean);
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}s"));
    let ratio = |m: Option<f64>, h: Option<f64>| m.zip(h).map_or("-".to_string(), |(m, h)| format!("{:.2}x", m / h));
    let rounds = &run.settings["rounds"];
    println!(
        "Fault (one write per page) and munmap of {} MiB, mean of {rounds} interleaved rounds after a warm-up\n\
         (model on a warm arena):\n",
        size >> 20
    );
    let mut t = new_table([
        "Folio",
        "model fault",
        "host fault",
        "model/host",
        "model munmap",
        "host munmap",
        "model/host",
        "model ns/page: fault",
        "munmap",
    ]);
    let pages = (size / 4096) as f64;
    let per_page = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.0}", v * 1e9 / pages));
    for (folio, _) in SIZES {
        let [mf, hf, mu, hu] = [(fault, "model"), (fault, "host"), (munmap, "model"), (munmap, "host")]
            .map(|(t, series)| mean(t, folio, series));
        t.add_row([
            folio.to_string(),
            opt(mf),
            opt(hf),
            ratio(mf, hf),
            opt(mu),
            opt(hu),
            ratio(mu, hu),
            per_page(mf),
            per_page(mu),
        ]);
    }
    println!("{t}");
    let [fresh, warm, pieces] = MEMSETS.map(|(name, _)| mean(memset, "memset", name).unwrap_or(f64::NAN));
    println!(
        "\nmemset of {} MiB on this host: {fresh:.4}s into fresh memory; into memory already faulted {warm:.4}s \
         at once, {pieces:.4}s 2 MiB at a time (a THP fault's zeroing)",
        size >> 20
    );
    if let Some(thp) = mean(fault, "2M", "model") {
        println!(
            "model 2M THP fault: {:.2}x of warm memset 2 MiB at a time, {:.2}x of one warm memset",
            thp / pieces,
            thp / warm
        );
    }
}
