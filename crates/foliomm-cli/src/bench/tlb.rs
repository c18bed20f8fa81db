//! `foliomm bench tlb`: what the software TLB costs the model, faulting and
//! writing a region with and without it, in interleaved rounds.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use foliomm::{Config, Design, Machine};

use super::progress::Progress;
use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::stats::{change, summarize};
use super::{machine_for, model_populate, new_table, secs, CommonArgs};

/// The configurations: name and TLB entries.
const CONFIGS: [(&str, usize); 2] = [("TLB on (2048 entries)", 2048), ("TLB off (walk every access)", 0)];

/// What is timed, a table each.
const TIMED: [&str; 2] = ["fault, one write per page", "write every byte"];

/// `bench tlb` as the runner drives it.
pub(super) struct Tlb<'a> {
    args: &'a CommonArgs,
    size: u64,
    /// A machine per configuration.
    machines: Vec<Arc<Machine>>,
}

impl<'a> Tlb<'a> {
    pub(super) fn new(args: &'a CommonArgs) -> Result<Tlb<'a>> {
        Ok(Tlb { args, size: args.size_or("1G")?, machines: Vec::new() })
    }
}

impl Benchmark for Tlb<'_> {
    /// An index into [`CONFIGS`].
    type Config = usize;
    const NAME: &'static str = "tlb";

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "size": self.size })
    }

    fn tables(&self) -> Vec<Table> {
        let table = |what| Table {
            name: format!("software TLB: {what}"),
            unit: "s".into(),
            higher_is_better: false,
            rows: Vec::new(),
        };
        TIMED.map(table).into()
    }

    fn plan(&self, _host: bool) -> Vec<Vec<usize>> {
        vec![(0..CONFIGS.len()).collect()]
    }

    fn prepare(&mut self, _: &[usize], _: &Progress) -> Result<()> {
        let config = |tlb_entries| Config { tlb_entries, ..self.args.config(Design::MmId) };
        self.machines = CONFIGS.iter().map(|&(_, n)| machine_for(self.size, config(n))).collect::<Result<_>>()?;
        Ok(())
    }

    fn place(&self, &c: &usize) -> (String, String) {
        (format!("{} MiB", self.size >> 20), CONFIGS[c].0.into())
    }

    fn on_host(&self, _: &usize) -> bool {
        false
    }

    fn measure(&mut self, &c: &usize) -> Result<Measurement> {
        let (m, size) = (&self.machines[c], self.size);
        let mut cpu = m.new_cpu();
        let (mm, addr, fault) = model_populate(m, &mut cpu, size, 0)?;
        let t = Instant::now();
        cpu.fill(&mm, addr, size, 0x33)?;
        let write = t.elapsed();
        mm.munmap(addr, size)?;
        Ok(Measurement::of([secs(fault), secs(write)]))
    }

    fn print(&self, run: &SavedRun) {
        let row = format!("{} MiB", self.size >> 20);
        let samples = |t: usize, c: usize| run.tables[t].samples(&row, CONFIGS[c].0).unwrap_or_default();
        println!(
            "Faulting {} MiB with 4K pages (one write per page), then writing every byte; mean of {} interleaved rounds:\n",
            self.size >> 20,
            run.settings["rounds"]
        );
        let mut table = new_table(["configuration", "fault", "write all bytes"]);
        for (c, (name, _)) in CONFIGS.iter().enumerate() {
            let mean = |t| format!("{:.4}s", summarize(samples(t, c)).mean);
            table.add_row([name.to_string(), mean(0), mean(1)]);
        }
        println!("{table}");
        let [fault, write] = [0, 1].map(|t| change(samples(t, 1), samples(t, 0), 2));
        println!("\nTLB on against off (interval 95% for both together, '~' = noise): fault {fault}, write {write}");
    }
}
