//! The benchmarks' workers: a timed loop per thread, on OS threads or on
//! simulated CPUs, for a fixed number of loops or side by side until
//! every worker has made its share.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use foliomm::internals::sync::cacheline::{self, Transfers};
use foliomm::internals::sync::sim::{self, Profile};
use foliomm_host::sys::{thread_cpu_time, Workers};

/// A run on simulated CPUs ([`sim`](foliomm::internals::sync::sim)): the cost profile, the seed of the
/// interleaving, and the quantum (picoseconds) a CPU may run ahead.
#[derive(Clone, Debug)]
pub(super) struct Simulated {
    pub profile: Profile,
    pub seed: u64,
    pub quantum: u64,
}

impl Simulated {
    /// The nodes of the model's machine: the profile's, at least one.
    pub(super) fn nodes(&self) -> usize {
        self.profile.nodes.max(1) as usize
    }

    /// The node simulated CPU `cpu` (from 0) runs on.
    pub(super) fn node(&self, cpu: usize) -> usize {
        self.profile.socket(cpu) % self.nodes()
    }

    /// The run of configuration `key`'s next round: round r runs with
    /// seed + r, so that the rounds' spread is the seeds'.
    pub(super) fn next_round<K: std::hash::Hash + Eq>(&self, rounds: &mut HashMap<K, u64>, key: K) -> Simulated {
        let r = rounds.entry(key).or_default();
        *r += 1;
        Simulated { seed: self.seed + *r - 1, ..self.clone() }
    }
}

/// A benchmark's simulation, if it runs on simulated CPUs, with the
/// rounds each configuration `K` has run.
pub(super) type SimRounds<K> = Option<(Simulated, HashMap<K, u64>)>;

/// The benchmarks' options for simulated CPUs.
#[derive(clap::Args, Clone, Debug)]
pub(super) struct SimArgs {
    /// Run on simulated CPUs (each count 1 to 64, comma-separated):
    /// virtual time from a cost profile, the same figures on every run and
    /// machine for one seed.
    #[arg(long = "sim-cpus", value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// The first seed of the simulated interleavings; round r uses seed+r,
    /// so the rounds' spread is the seeds'.
    #[arg(long = "sim-seed", default_value_t = 1)]
    seed: u64,
    /// How far (ns of simulated time) a simulated CPU may run ahead of the
    /// next before it hands over (0: strictly in clock order).
    #[arg(long = "sim-quantum", default_value_t = 0)]
    quantum: u64,
    /// The cost profile: `two-socket-server` (published latencies),
    /// `cheap-atomics` (the same with locked RMWs as cheap as plain stores,
    /// seed 000's AMD EPYC) or a file `foliomm sim calibrate` wrote.
    #[arg(long = "sim-profile", default_value = "two-socket-server")]
    profile: String,
    /// Adjacent-line prefetch on: a line moves with its 128-byte buddy, as
    /// on the Broadwell machines where seed 004's old regression showed.
    #[arg(long = "sim-prefetch")]
    prefetch: bool,
    /// NUMA nodes of the simulated machine (1 to 8), one per socket:
    /// simulated CPU c runs on node c mod N, as the scheduler spreads busy
    /// threads over the sockets, and allocates there (each node has its
    /// own zone lock, per-CPU lists and LRU lock); the model's machine gets
    /// N nodes. 1: one node, the profile's sockets filled in turn
    /// [default: the profile's, one for the built-in ones].
    #[arg(long = "sim-nodes")]
    nodes: Option<u32>,
}

impl SimArgs {
    /// The simulation the options ask for, if `--sim-cpus` was given.
    pub(super) fn simulated(&self) -> Result<Option<Simulated>> {
        if self.cpus.is_empty() {
            return Ok(None);
        }
        ensure!(
            self.cpus.iter().all(|c| (1..=64).contains(c)),
            "--sim-cpus: expected CPU counts from 1 to 64, like 1,4,7,12,21,30,48,56"
        );
        let quantum = self.quantum.checked_mul(1000).context("--sim-quantum: too large")?;
        let mut profile = crate::sim::profile(&self.profile)?;
        profile.adjacent_prefetch |= self.prefetch;
        profile.nodes = self.nodes.unwrap_or(profile.nodes.max(1));
        ensure!((1..=8).contains(&profile.nodes), "--sim-nodes: expected 1 to 8 nodes, not {}", profile.nodes);
        Ok(Some(Simulated { profile, seed: self.seed, quantum }))
    }
}

/// What one worker did: its loops, its wall and CPU time over them, and
/// the cache-line transfers into its simulated CPU (model only).
pub(super) struct Sample {
    pub loops: u32,
    pub wall: Duration,
    pub cpu: Duration,
    pub transfers: Transfers,
}

/// How many loops each worker makes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Loops {
    /// This many each.
    Each(u32),
    /// At least this many each, and on until every worker has made as
    /// many: the workers run side by side for the whole measurement, as
    /// programs that loop until they are stopped do (seed 002's), however
    /// long one loop of each takes.
    Overlapping(u32),
}

/// What the workers of one run share to loop as [`Loops`] says: the
/// threads of a run, or processes through a shared page.
pub(super) struct Gate<'a> {
    pub loops: Loops,
    pub workers: u32,
    /// Workers that have made their least loops; 0 at first, and at
    /// least `workers` once one failed ([`Gate::release`]).
    pub through: &'a AtomicU32,
}

impl Gate<'_> {
    /// Runs `lp` as the loops say; returns the loops it made. An error or
    /// a panic of `lp` releases the others.
    pub(super) fn run<S>(&self, state: &mut S, lp: &mut impl FnMut(&mut S) -> Result<()>) -> Result<u32> {
        let (least, overlap) = match self.loops {
            Loops::Each(n) => (n, false),
            Loops::Overlapping(n) => (n, true),
        };
        let _unwinding = ReleaseOnUnwind(self);
        let mut made = 0;
        loop {
            if made == least {
                self.through.fetch_add(1, Ordering::SeqCst);
            }
            if made >= least && (!overlap || self.through.load(Ordering::SeqCst) >= self.workers) {
                return Ok(made);
            }
            if let Err(e) = lp(state) {
                self.release();
                return Err(e);
            }
            made += 1;
        }
    }

    /// A worker failed: the others stop once they have made their least
    /// loops, and wait for nobody.
    pub(super) fn release(&self) {
        self.through.fetch_add(self.workers, Ordering::SeqCst);
    }
}

/// Releases the gate's other workers if its worker panics.
struct ReleaseOnUnwind<'g, 'a>(&'g Gate<'a>);

impl Drop for ReleaseOnUnwind<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.release();
        }
    }
}

/// `workers` workers on OS threads ([`run_threads`]) or on simulated CPUs.
pub(super) fn run_workers<S, L>(
    workers: usize,
    loops: Loops,
    simulated: Option<&Simulated>,
    setup: impl Fn(usize) -> (S, L) + Sync,
) -> Result<Vec<Sample>>
where
    L: FnMut(&mut S) -> Result<()>,
{
    match simulated {
        Some(s) => run_simulated(workers, loops, s, setup),
        None => run_threads(workers, loops, setup),
    }
}

/// [`run_threads`] on simulated CPUs: each worker's times are its CPU's
/// simulated clock over its loops (wall and CPU time alike: a CPU asleep
/// on a lock counts as busy, nothing else runs on it), its transfers
/// those the coherence model counted.
fn run_simulated<S, L>(
    workers: usize,
    loops: Loops,
    s: &Simulated,
    setup: impl Fn(usize) -> (S, L) + Sync,
) -> Result<Vec<Sample>>
where
    L: FnMut(&mut S) -> Result<()>,
{
    let through = AtomicU32::new(0);
    let gate = Gate { loops, workers: workers as u32, through: &through };
    let (results, _) = sim::run(workers, s.profile.clone(), s.seed, s.quantum, |i| {
        foliomm::internals::phys::set_local_node(s.node(i));
        let (mut state, mut lp) = setup(i);
        let start = sim::report();
        let made = gate.run(&mut state, &mut lp)?;
        // Timed and counted up to here: not the setup, nor the state's drop.
        let end = sim::report();
        let took = Duration::from_nanos((end.clock - start.clock) / 1000);
        Ok(Sample { loops: made, wall: took, cpu: took, transfers: end.transfers.since(&start.transfers) })
    });
    results.into_iter().collect()
}

/// Runs `workers` threads: each makes its state with `setup(i)`, waits for
/// the others, then runs its loop as `loops` says, timed.
pub(super) fn run_threads<S, L>(
    workers: usize,
    loops: Loops,
    setup: impl Fn(usize) -> (S, L) + Sync,
) -> Result<Vec<Sample>>
where
    L: FnMut(&mut S) -> Result<()>,
{
    let (start, through) = (Barrier::new(workers), AtomicU32::new(0));
    let gate = Gate { loops, workers: workers as u32, through: &through };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|i| {
                let (setup, start, gate) = (&setup, &start, &gate);
                s.spawn(move || {
                    let (mut state, mut lp) = setup(i);
                    cacheline::take();
                    start.wait();
                    let (t, c) = (Instant::now(), thread_cpu_time());
                    let made = gate.run(&mut state, &mut lp);
                    let (wall, cpu) = (t.elapsed(), thread_cpu_time() - c);
                    let sample = made.map(|loops| Sample { loops, wall, cpu, transfers: cacheline::take() });
                    cacheline::account_as(0);
                    sample
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().map_err(|_| anyhow::anyhow!("a benchmark thread panicked"))?).collect()
    })
}

/// Starts host workers that each report a rate (an `f64`'s bits; not
/// above 0 when it failed) and returns the rates by worker number, in any
/// order; `failed` says what a failed worker means.
pub(super) fn host_rates(mut workers: Workers<1>, failed: &str) -> Result<Vec<(usize, f64)>> {
    workers.start()?;
    let reports = workers.reports().context("host")?;
    let rates = reports.into_iter().map(|(i, [rate])| (i, f64::from_bits(rate)));
    rates.map(|(i, rate)| if rate > 0.0 { Ok((i, rate)) } else { Err(anyhow::anyhow!("{failed}")) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Overlapping workers run on until the slowest has made its least;
    /// counted ones stop at their count.
    #[test]
    fn overlapping_workers_wait_for_the_slowest() {
        // Worker 0's first loop lasts until worker 1 has made `wait_for`
        // (or 10 s have passed: then worker 1 stopped too early).
        let run = |loops, wait_for: u32| {
            let made_by_1 = AtomicU32::new(0);
            let samples = run_threads(2, loops, |i| {
                let made_by_1 = &made_by_1;
                ((), move |_: &mut ()| {
                    let t = Instant::now();
                    match i {
                        0 => {
                            while made_by_1.load(Ordering::SeqCst) < wait_for && t.elapsed().as_secs() < 10 {
                                std::thread::yield_now();
                            }
                        }
                        _ => _ = made_by_1.fetch_add(1, Ordering::SeqCst),
                    }
                    Ok(())
                })
            });
            samples.unwrap().iter().map(|s| s.loops).collect::<Vec<_>>()
        };
        assert_eq!(run(Loops::Each(3), 0), [3, 3]);
        let overlapping = run(Loops::Overlapping(3), 20);
        assert!(overlapping[0] == 3 && overlapping[1] >= 20, "made {overlapping:?}");
    }

    /// A failing or panicking worker releases the others (which give up
    /// after 10 s: then the count shows it).
    #[test]
    fn a_failing_worker_releases_the_others() {
        for panics in [false, true] {
            let made_by_1 = AtomicU32::new(0);
            let start = Instant::now();
            let r = std::panic::catch_unwind(|| {
                run_threads(2, Loops::Overlapping(2), |i| {
                    let made_by_1 = &made_by_1;
                    ((), move |_: &mut ()| match i {
                        0 if panics => panic!("worker 0 panics"),
                        0 => anyhow::bail!("worker 0 fails"),
                        _ if start.elapsed().as_secs() >= 10 => anyhow::bail!("worker 1 was never released"),
                        _ => Ok(_ = made_by_1.fetch_add(1, Ordering::SeqCst)),
                    })
                })
            });
            assert!(r.is_err() || r.is_ok_and(|r| r.is_err()), "the run fails");
            let made = made_by_1.load(Ordering::SeqCst);
            assert!(start.elapsed().as_secs() < 10 && made >= 2, "panics {panics}: worker 1 made {made} loops");
        }
    }
}
