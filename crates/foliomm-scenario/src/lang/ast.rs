//! The syntax tree of the workload language: one [`Step`] per line, its
//! [`Cmd`], and the [`ParseError`] a line that does not parse yields.

use foliomm::internals::folio::thp::khugepaged::KhugepagedKnob;
use foliomm::internals::folio::thp::{ShmemHuge, ShmemMode, ThpMode};
use foliomm::internals::machine::HugeSize;
use foliomm::internals::mapcount::{Design, RmapIdStage};
use foliomm::internals::mm::Advice;
use foliomm::internals::mm_types::Prot;
use foliomm::internals::release::KernelVersion;
use foliomm::Errno;

use super::daemon::Daemon;
use super::machine_setting::MachineSetting;
use crate::op::{FileKind, GupKind};

/// A parse error with its position (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {col}: {}", shortened(.msg))]
pub struct ParseError {
    pub line: usize,
    pub col: usize,
    pub msg: String,
}

/// `msg` cut after 400 characters (a message quoting a token of a huge
/// line would otherwise repeat the line).
fn shortened(msg: &str) -> String {
    const MAX: usize = 400;
    match msg.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}… (cut: {} characters in all)", &msg[..at], msg.chars().count()),
        None => msg.to_string(),
    }
}

pub use super::place::Place;

#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// A setting that shapes the machine; only before the first process step.
    SetMachine(MachineSetting),
    /// A system tunable set while the machine runs (`set thp`, `set
    /// shmem`, `set hugetlb`).
    Tune(Tunable),
    SetCheck(bool),
    /// Start timing the following steps (`measure NAME`).
    Measure(String),
    /// Stop timing (`end`).
    End,
    /// `repeat N`: the lines up to its `end` run N times (unrolled by the parser).
    Repeat(u64),
    /// `parallel` ... `end`: each thread's lines of the block run on their
    /// own OS thread, all threads starting together; the block ends when
    /// all have finished. The parser gathers the lines into this step.
    Parallel(Vec<Step>),
    Mmap {
        name: String,
        len: u64,
        prot: Prot,
        populate: bool,
        at: Option<u64>,
        fixed: bool,
        /// Place the mapping at a multiple of this (over-allocate, then trim).
        align: Option<u64>,
        /// `MAP_SHARED` (else `MAP_PRIVATE`).
        shared: bool,
        /// The file mapped (`file F`), from byte `offset`; anonymous if none.
        file: Option<String>,
        offset: u64,
        /// `MAP_HUGETLB` (`hugetlb`, or `hugetlb=1G` for `MAP_HUGE_1GB`).
        hugetlb: Option<HugeSize>,
        /// `MAP_NORESERVE` (`noreserve`).
        noreserve: bool,
        /// `MAP_LOCKED` (`locked`).
        locked: bool,
    },
    /// `NAME = memfd SIZE [hugetlb[=1G]]` or `NAME = tmpfs SIZE [huge=MODE] [unlinked]`: a
    /// new shmem file (`memfd_create`, or a file on a tmpfs mount of its
    /// own, + `ftruncate`), its descriptor inherited by children forked
    /// later.
    CreateFile {
        name: String,
        size: u64,
        kind: FileKind,
    },
    /// `close FILE`: this process's descriptor of the file goes; the file
    /// lives on while another descriptor or a mapping holds it.
    Close(String),
    /// `NAME = shmget SIZE [hugetlb[=1G]]`: a System V shared memory
    /// segment (any process may attach it).
    ShmGet {
        name: String,
        size: u64,
        hugetlb: Option<HugeSize>,
    },
    /// `NAME = shmat SEGMENT [r]`: attaches the segment (read-only with
    /// `r`); NAME is the mapping.
    ShmAt {
        name: String,
        shm: String,
        readonly: bool,
    },
    /// `shmdt MAPPING`: detaches the attach `MAPPING` names.
    ShmDt(String),
    /// `shmrm SEGMENT` (`shmctl(IPC_RMID)`).
    ShmRm(String),
    /// `unlink FILE`: a named tmpfs file loses its name.
    Unlink(String),
    /// `seal FILE SEAL...` (`fcntl(F_ADD_SEALS)`): `seal`, `shrink`,
    /// `grow`, `write`, `future_write`, as `F_SEAL_*` bits.
    Seal {
        file: String,
        seals: u32,
    },
    /// `pwrite FILE[START..END] = VAL`: writes `len` bytes of `val`.
    Pwrite {
        file: String,
        offset: u64,
        len: u64,
        val: u8,
    },
    /// `pread FILE[START..END]`: reads and checks the bytes (a short read
    /// at the end of the file).
    Pread {
        file: String,
        offset: u64,
        len: u64,
    },
    /// `fallocate FILE[START..END] [keep_size]`.
    Fallocate {
        file: String,
        offset: u64,
        len: u64,
        keep_size: bool,
    },
    /// `truncate FILE SIZE` (`ftruncate`).
    Truncate {
        file: String,
        size: u64,
    },
    /// `punch FILE[START..END]` (`fallocate(PUNCH_HOLE | KEEP_SIZE)`).
    Punch {
        file: String,
        offset: u64,
        len: u64,
    },
    Munmap(Place),
    Mprotect(Place, Prot),
    Madvise(Place, Advice),
    /// `mlock` (true) or `munlock` (false) of a place.
    Mlock(Place, bool),
    /// `clear_refs soft_dirty` (`echo 4 > /proc/PID/clear_refs`).
    ClearSoftDirty,
    /// `cpu N`: the thread moves to CPU N (`sched_setaffinity`).
    SetCpu(u32),
    /// `khugepaged [N]` / `ksmd [N]`: N full scans of the daemon over every
    /// MM it has a slot for (1 unless given).
    Scan(Daemon, u32),
    /// `split PLACE [to order N] [at PAGE]`: the kernel's debugfs
    /// `split_huge_pages` over the place (to order 0 unless given), each
    /// folio split around its page PAGE if given (`in_folio_offset`, 6.15
    /// on: `folio_split`).
    Split(Place, u32, Option<u64>),
    /// `move_pages PLACE [to NODE] [all] [unmoved N] [status S...]`:
    /// `move_pages(2)` of every page of the place, to NODE (a query
    /// without), `MPOL_MF_MOVE_ALL` with `all`. The call must leave
    /// `unmoved` pages unmigrated (0 unless given) and, with `status`, write
    /// those statuses.
    MovePages(MovePagesStep),
    /// `numa_scan PLACE`: one pass of automatic NUMA balancing's scan
    /// (`task_numa_work`) over the place (model only).
    NumaScan(Place),
    /// `mbind PLACE MODE [NODES] [move|move_all] [strict]`: `mbind(2)` of
    /// the place with an `MPOL_*` mode, a node mask and `MPOL_MF_*` flags.
    Mbind(MbindStep),
    Mremap {
        name: String,
        from: Place,
        size: Option<u64>,
        to: Option<String>,
        /// `MREMAP_DONTUNMAP`: the source stays mapped, emptied.
        dontunmap: bool,
    },
    Fork(String),
    Exit,
    Wait(String),
    /// One byte per page (`every_byte` false) or every byte.
    Write {
        place: Place,
        val: Option<u8>,
        every_byte: bool,
    },
    /// Every byte from the address pattern with a seed.
    Pattern {
        place: Place,
        seed: u8,
    },
    Read {
        place: Place,
        every_byte: bool,
    },
    /// `observe PLACE as NAME [except FIELD...]`: the named fields are
    /// not recorded (nor compared, nor usable by `expect`).
    Observe {
        place: Place,
        name: String,
        except: Vec<String>,
    },
    /// GUP references to a range: `NAME = pin PLACE [write] [longterm]`
    /// (FOLL_PIN) or `NAME = get PLACE` (FOLL_GET, as vmsplice takes).
    Pin {
        name: String,
        place: Place,
        kind: GupKind,
    },
    Unpin(String),
    /// An observation the parser builds whole (`observe zero_page as z`):
    /// the interpreter performs `op` and records its answer as `name`.
    Query {
        op: crate::op::Op,
        name: String,
    },
    /// Observe the first page a pin holds (`observe pin NAME as OBS`).
    ObservePin {
        pin: String,
        name: String,
    },
    Userfaultfd {
        name: String,
        sigbus: bool,
    },
    Uffd(super::uffd_step::UffdStep),
    Expect {
        lhs: Operand,
        op: CmpOp,
        rhs: Operand,
        /// Only where the run matches (`expect [mm-id] ...`, `expect [6.13+] ...`).
        only: Only,
    },
}

/// Where an `expect` line holds: under any of `designs` (all if empty),
/// on a release inside `releases`, and at no stage of `not_stages`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Only {
    pub designs: Vec<Design>,
    /// From the first release (`6.13+`), before the second (`<6.13`).
    pub releases: (Option<KernelVersion>, Option<KernelVersion>),
    /// Seed 000's stages of the rmap-ID designs where it does not hold
    /// (`!all-pmd`); other designs ignore them.
    pub not_stages: Vec<RmapIdStage>,
}

/// What a run is, for `expect [...]`: the design whose answers it gives
/// (after the stage's [`RmapIdStage::answers_as`]), the release it
/// follows, and the stage of the rmap-ID designs.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub design: Design,
    pub release: KernelVersion,
    pub stage: RmapIdStage,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.design)?;
        if self.design.has_stages() {
            write!(f, " at stage {}", self.stage.name())?;
        }
        write!(f, ", Linux {}", self.release)
    }
}

impl Only {
    /// The designs and releases of a bracket list, `[mm-id, 6.13+]` without
    /// the brackets' content parsed (the text keeps its closing `]`).
    pub(super) fn parse_list(text: &str) -> Result<Only, String> {
        let mut only = Only::default();
        for name in text.trim_end_matches(']').split(',').map(str::trim).filter(|d| !d.is_empty()) {
            let release = |v: &str| v.parse::<KernelVersion>();
            let stage = name.strip_prefix('!').map(|s| RmapIdStage::parse(s).ok_or(s));
            match (Design::parse(name), name.strip_suffix('+'), name.strip_prefix('<'), stage) {
                (Some(d), ..) => only.designs.push(d),
                (_, Some(v), ..) => only.releases.0 = Some(release(v)?),
                (_, _, Some(v), _) => only.releases.1 = Some(release(v)?),
                (.., Some(Ok(s))) => only.not_stages.push(s),
                (.., Some(Err(s))) => {
                    return Err(format!("expected a stage of the rmap-id designs after '!', found '{s}'"))
                }
                _ => {
                    let known = Design::names();
                    return Err(format!(
                        "expected a mapcount design ({known}), a release range (6.13+ or <6.13) or !STAGE, found '{name}'"
                    ));
                }
            }
        }
        Ok(only)
    }

    /// Whether `run` matches.
    pub fn matches(&self, run: Run) -> bool {
        let (from, before) = self.releases;
        (self.designs.is_empty() || self.designs.contains(&run.design))
            && from.is_none_or(|f| run.release >= f)
            && before.is_none_or(|b| run.release < b)
            && !(run.design.has_stages() && self.not_stages.contains(&run.stage))
    }
}

/// The condition as its bracket says it: `[mm-id, 6.13+]`.
impl std::fmt::Display for Only {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut items: Vec<String> = self.designs.iter().map(|d| d.name().to_string()).collect();
        items.extend(self.releases.0.map(|v| format!("{v}+")));
        items.extend(self.releases.1.map(|v| format!("<{v}")));
        items.extend(self.not_stages.iter().map(|s| format!("!{}", s.name())));
        write!(f, "[{}]", items.join(", "))
    }
}

/// A system tunable: what the host writes to sysfs and restores after the
/// run (the settings table, `lang::settings`, names each file).
#[derive(Debug, Clone, PartialEq)]
pub enum Tunable {
    /// `set thp`: the top-level anonymous THP mode and per-size modes.
    Thp { enabled: Option<ThpMode>, sizes: Vec<(u32, ThpMode)> },
    /// `set shmem`: `shmem_enabled` and per-size shmem modes.
    Shmem { enabled: Option<ShmemHuge>, sizes: Vec<(u32, ShmemMode)> },
    /// `set hugetlb pages=N [overcommit=M] [size=2M|1G]`: `nr_hugepages`
    /// of the pool of that page size (2 MiB unless said), and its
    /// `nr_overcommit_hugepages`.
    Hugetlb { pages: u64, overcommit: Option<u64>, size: HugeSize },
    /// `set hugetlb_optimize_vmemmap on|off`: `vm.hugetlb_optimize_vmemmap`
    /// (HVO), for the huge pages made from then on.
    HugetlbVmemmap(bool),
    /// `set khugepaged KNOB=N...`: khugepaged's tunables
    /// (`transparent_hugepage/khugepaged/max_ptes_none`, ...).
    Khugepaged(Vec<(KhugepagedKnob, u32)>),
}

/// A `move_pages` step's arguments and what it must give.
#[derive(Debug, Clone, PartialEq)]
pub struct MovePagesStep {
    pub place: Place,
    pub node: Option<i32>,
    pub all: bool,
    pub unmoved: u64,
    /// Per page: a node, `-errno`, or `None` for a status left unwritten;
    /// each list for the designs and releases its `Only` names.
    pub status: Vec<(Only, Vec<Option<i32>>)>,
}

/// An `mbind` step's arguments: the `MPOL_*` mode, the node mask and the
/// `MPOL_MF_*` flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MbindStep {
    pub place: Place,
    pub mode: u32,
    pub nodes: u64,
    pub flags: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// `name.field` of an observation, or `stat.counter`.
    Field {
        obj: String,
        field: String,
    },
    Num(u64),
    Bool(bool),
    /// `a + b` or (`minus`) `a - b`, left to right: `after.rss_kb ==
    /// before.rss_kb + 4`.
    Sum {
        lhs: Box<Operand>,
        minus: bool,
        rhs: Box<Operand>,
    },
}

impl Operand {
    /// Every `name.field` the operand reads, as (name, field).
    pub fn fields(&self) -> Vec<(&str, &str)> {
        match self {
            Operand::Field { obj, field } => vec![(obj, field)],
            Operand::Sum { lhs, rhs, .. } => [lhs.fields(), rhs.fields()].concat(),
            Operand::Num(_) | Operand::Bool(_) => Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub fn holds(self, a: u64, b: u64) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
    pub fn symbol(self) -> &'static str {
        ["==", "!=", "<", "<=", ">", ">="][self as usize]
    }
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub line: usize,
    pub text: String,
    /// The process that runs it (`None` for `set` and `expect`).
    pub proc: Option<String>,
    /// The named thread of `proc` that runs it (`P.t1:`); `None` for the
    /// thread the process started with (`P:`).
    pub thread: Option<String>,
    pub cmd: Cmd,
    /// The step must fail with this error.
    pub fails: Option<Errno>,
    /// Where the step must fail (`fails [<6.7] EPERM`); elsewhere it must
    /// succeed.
    pub fails_only: Only,
}
