//! Operations as data: every operation a scenario asks of a backend is one
//! [`Op`], made by one thread, answered by one [`Reply`] or a typed
//! [`crate::error::StepError`]. The interpreter builds the `Op`s; the model
//! backend, the host worker and (through the host backend) the guest agent
//! each perform them in one `match`, so that a new operation is a compile
//! error in every place that must handle it. The host protocol is the
//! serialized `Op` and the serialized reply.

use foliomm::internals::machine::HugeSize;
use foliomm::internals::mm::{Advice, PageInfo};
use foliomm::internals::mm_types::{Prot, UffdReason};

use crate::error::{BackendResult, Machinery, StepError};
use crate::observation::Observation;

/// One operation of one thread (the caller passes the thread with it).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Op {
    /// Creates the calling thread's process: an empty address space and
    /// thread 0 (the caller is that thread).
    Spawn,
    /// Creates the calling thread in an existing process, sharing its
    /// address space (`clone(CLONE_VM | CLONE_THREAD)`).
    SpawnThread,
    /// Ends the calling thread (not thread 0: a process ends with [`Op::Exit`]).
    ExitThread,
    /// Ends the process with all its threads (`exit_group`).
    Exit,
    /// The caller forks: the child is process `child` with one thread, the
    /// copy of the caller.
    Fork {
        child: String,
    },
    /// `mmap` of anonymous memory or of a file, private or shared; replies
    /// with the address.
    Mmap(MmapRequest),
    Munmap {
        addr: u64,
        len: u64,
    },
    Mprotect {
        addr: u64,
        len: u64,
        prot: Prot,
    },
    Madvise {
        addr: u64,
        len: u64,
        advice: Advice,
    },
    /// Split the large folios mapped in `[addr, addr + len)` to `order`
    /// (debugfs `split_huge_pages`), around page `at` of each if given.
    SplitHugePages {
        addr: u64,
        len: u64,
        order: u32,
        at: Option<u64>,
    },
    /// Split the large folios of a file's page cache in `[offset, offset +
    /// len)` to `order`, around page `at` of each if given (debugfs
    /// `split_huge_pages` given the file's path).
    SplitFile {
        file: u64,
        offset: u64,
        len: u64,
        order: u32,
        at: Option<u64>,
    },
    /// `move_pages(0, ...)` of every page of `[addr, addr + len)`: to
    /// `node`, or without one a query; `all` for `MPOL_MF_MOVE_ALL`.
    /// Replies [`Reply::Moved`].
    MovePages {
        addr: u64,
        len: u64,
        node: Option<i32>,
        all: bool,
    },
    /// One NUMA balancing scan pass over `[addr, addr + len)`
    /// (`task_numa_work`, which a kernel runs on its own schedule: the
    /// host and guest cannot); replies with the pages made PROT_NONE.
    NumaScan {
        addr: u64,
        len: u64,
    },
    /// `mbind(addr, len, mode, &nodes, maxnode, flags)`.
    Mbind {
        addr: u64,
        len: u64,
        mode: u32,
        nodes: u64,
        flags: u32,
    },
    /// `echo 4 > /proc/self/clear_refs`: the caller's soft-dirty bits cleared.
    ClearSoftDirty,
    /// `sched_setaffinity(0, ...)`: the calling thread runs on its machine's
    /// CPU number `cpu` (counted among the online CPUs) from now on, and
    /// the threads and children it makes later start there.
    SetCpu {
        cpu: u32,
    },
    /// `mlock` (`lock`) or `munlock`.
    Mlock {
        addr: u64,
        len: u64,
        lock: bool,
    },
    /// `mremap` with `MREMAP_MAYMOVE`, and `MREMAP_FIXED` when `to` is
    /// given; replies with the new address.
    Mremap {
        addr: u64,
        len: u64,
        new_len: u64,
        to: Option<u64>,
        /// `MREMAP_DONTUNMAP`: the source stays mapped, emptied.
        #[serde(default)]
        dontunmap: bool,
    },
    /// An access on the caller's CPU; a read replies with the bytes read.
    Access {
        addr: u64,
        len: u64,
        access: Access,
    },
    /// The first page of a range as pagemap and kpageflags report it, and
    /// smaps-style sums over the range.
    Observe {
        addr: u64,
        len: u64,
    },
    /// What the page tables map at `addr`, for a trace: no access through
    /// the caller's CPU (no TLB fill, no accessed bit), no precision
    /// judgement. Replies [`Reply::Peeked`].
    Peek {
        addr: u64,
    },
    /// A new shmem file (`memfd_create`, or `open` on a tmpfs mount, and
    /// `ftruncate`), inherited by children forked later; replies with its handle.
    CreateFile {
        kind: FileKind,
        size: u64,
    },
    Ftruncate {
        file: u64,
        size: u64,
    },
    /// `close`: the calling process's descriptor of the file.
    Close {
        file: u64,
    },
    /// `unlink` of a named tmpfs file's name (ENOENT for a file without
    /// one); the file lives on while descriptors or mappings hold it.
    Unlink {
        file: u64,
    },
    /// `shmget(IPC_PRIVATE, size, IPC_CREAT | 0600 [| SHM_HUGETLB with a
    /// page size])`; replies with the segment's id.
    ShmGet {
        size: u64,
        hugetlb: Option<HugeSize>,
    },
    /// `shmat(id, NULL, readonly ? SHM_RDONLY : 0)`; replies with the address.
    ShmAt {
        shm: u64,
        readonly: bool,
    },
    /// `shmdt(addr)`.
    ShmDt {
        addr: u64,
    },
    /// `shmctl(id, IPC_RMID)`.
    ShmRm {
        shm: u64,
    },
    /// `fcntl(F_ADD_SEALS)` with `F_SEAL_*` bits.
    AddSeals {
        file: u64,
        seals: u32,
    },
    /// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`.
    PunchHole {
        file: u64,
        offset: u64,
        len: u64,
    },
    /// `fallocate(keep_size ? FALLOC_FL_KEEP_SIZE : 0)`.
    Fallocate {
        file: u64,
        offset: u64,
        len: u64,
        keep_size: bool,
    },
    /// Replies with the number of bytes written.
    Pwrite {
        file: u64,
        offset: u64,
        data: Vec<u8>,
    },
    /// Replies with up to `len` bytes read.
    Pread {
        file: u64,
        offset: u64,
        len: u64,
    },
    /// The file's page at `offset` in the page cache, mapped nowhere for the
    /// purpose: `present` if cached, its frame, folio order and the byte at
    /// `offset`; and the file's `fstat`, seals and `SEEK_DATA`/`SEEK_HOLE`
    /// from `offset`. Allocates nothing.
    ObserveFile {
        file: u64,
        offset: u64,
    },
    /// Takes GUP references to the pages of a range; replies with a handle
    /// that the same thread passes to [`Op::Unpin`] and [`Op::ObservePin`].
    Pin {
        addr: u64,
        len: u64,
        kind: GupKind,
    },
    Unpin {
        pin: u64,
    },
    /// The first referenced page as it is now: frame and folio order where
    /// the backend can tell, and the byte at the referenced address.
    ObservePin {
        pin: u64,
    },
    /// The shared zero page (`ZERO_PAGE(0)`), as a read fault of private
    /// anonymous memory maps it: its frame, and that it is the zero page.
    ObserveZeroPage,
    /// `userfaultfd()` and `UFFDIO_API`, with `UFFD_FEATURE_SIGBUS` if
    /// `sigbus`; replies with its handle. A handler thread of the process
    /// answers the faults it is given by the rules [`UffdCall::On`] sets;
    /// a fault no rule answers fails its step ([`StepError::Hangs`]).
    Userfaultfd {
        sigbus: bool,
    },
    /// One call on the userfaultfd `uffd` (an ioctl, or a handler rule).
    Uffd {
        uffd: u64,
        call: UffdCall,
    },
}

/// A call on a userfaultfd (`ioctl(uffd, UFFDIO_*)`), or the rule its
/// handler thread follows.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum UffdCall {
    /// `UFFDIO_REGISTER` in `modes` (`VM_UFFD_*` bits of
    /// [`foliomm::internals::mm_types::vm`]); `page` is the size of the
    /// range's pages (a huge page size for hugetlb), which the handler
    /// resolves one at a time.
    Register { addr: u64, len: u64, modes: u32, page: u64 },
    /// `UFFDIO_UNREGISTER`.
    Unregister { addr: u64, len: u64 },
    /// `UFFDIO_COPY` of pages filled with `val` (`UFFDIO_COPY_MODE_WP` if
    /// `wp`), or with `val` `None` `UFFDIO_ZEROPAGE`; replies with the bytes
    /// done (the kernel's `copy`/`zeropage` field) unless none was.
    Fill { addr: u64, len: u64, val: Option<u8>, wp: bool },
    /// `UFFDIO_CONTINUE`: maps the pages the shmem file caches
    /// (`UFFDIO_CONTINUE_MODE_WP` if `wp`); replies as [`UffdCall::Fill`].
    Continue { addr: u64, len: u64, wp: bool },
    /// `UFFDIO_WRITEPROTECT` with (`protect`) or without `MODE_WP`.
    WriteProtect { addr: u64, len: u64, protect: bool },
    /// `UFFDIO_MOVE` of `[src, src + len)` to `dst`
    /// (`UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES` if `holes`); replies with the
    /// bytes moved unless none was.
    Move { src: u64, dst: u64, len: u64, holes: bool },
    /// How the handler answers faults of `reason` from now on.
    On { reason: UffdReason, action: UffdAction },
}

/// What a handler thread does with one fault: resolve its page, then wake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UffdAction {
    /// `UFFDIO_COPY` of a page filled with the byte.
    Copy(u8),
    /// `UFFDIO_ZEROPAGE`.
    ZeroPage,
    /// `UFFDIO_WRITEPROTECT` without `MODE_WP` of the page.
    Unprotect,
    /// `UFFDIO_CONTINUE` of the page.
    Continue,
}

/// What a backend replies to an [`Op`] that succeeded.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum Reply {
    Done,
    /// An address, a handle or a count.
    Value(u64),
    Bytes(Vec<u8>),
    Observed(Box<Observation>),
    Peeked(Peek),
    /// What `move_pages` returned (pages not migrated) and wrote: per
    /// page a node, `-errno`, or `None` where it wrote nothing.
    Moved {
        unmoved: u64,
        status: Vec<Option<i32>>,
    },
}

impl Reply {
    fn unexpected<T>(self, want: &str) -> BackendResult<T> {
        let got = match self {
            Reply::Done => "done",
            Reply::Value(_) => "a value",
            Reply::Bytes(_) => "bytes",
            Reply::Observed(_) => "an observation",
            Reply::Peeked(_) => "a peek",
            Reply::Moved { .. } => "move_pages statuses",
        };
        Err(StepError::Machinery(Machinery::Answer { want: want.into(), got: got.into() }))
    }

    /// The value of a [`Reply::Value`]; any other reply is a machinery failure.
    pub fn value(self) -> BackendResult<u64> {
        match self {
            Reply::Value(v) => Ok(v),
            r => r.unexpected("a value"),
        }
    }

    /// Success of an operation that returns nothing (a value is ignored).
    pub fn done(self) -> BackendResult<()> {
        match self {
            Reply::Done | Reply::Value(_) => Ok(()),
            r => r.unexpected("done"),
        }
    }

    /// The bytes of a [`Reply::Bytes`] (none for [`Reply::Done`]).
    pub fn bytes(self) -> BackendResult<Vec<u8>> {
        match self {
            Reply::Bytes(b) => Ok(b),
            Reply::Done => Ok(Vec::new()),
            r => r.unexpected("bytes"),
        }
    }

    /// The observation of a [`Reply::Observed`].
    pub fn observation(self) -> BackendResult<Observation> {
        match self {
            Reply::Observed(o) => Ok(*o),
            r => r.unexpected("an observation"),
        }
    }

    /// The result and statuses of a [`Reply::Moved`].
    pub fn moved(self) -> BackendResult<(u64, Vec<Option<i32>>)> {
        match self {
            Reply::Moved { unmoved, status } => Ok((unmoved, status)),
            r => r.unexpected("move_pages statuses"),
        }
    }

    /// The page of a [`Reply::Peeked`].
    pub fn peek(self) -> BackendResult<Peek> {
        match self {
            Reply::Peeked(p) => Ok(p),
            r => r.unexpected("a peek"),
        }
    }
}

/// How a step touches memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Access {
    /// Write `val` to the first byte of each page, or to every byte.
    Write { val: u8, every_byte: bool },
    /// Write every byte with [`pattern_byte`] of its offset from `origin`
    /// (the mapping's start, so that backends placing the mapping at
    /// different addresses write the same bytes) and `seed`.
    Pattern { origin: u64, seed: u8 },
    /// Read the first byte of each page, or every byte.
    Read { every_byte: bool },
}

/// The byte a `pattern` write puts at offset `off` of a mapping: it differs
/// between neighbouring bytes and between pages, so a page that shows up at
/// the wrong place is noticed.
pub fn pattern_byte(off: u64, seed: u8) -> u8 {
    ((off >> 12).wrapping_mul(0x9e37) ^ (off & 0xfff).wrapping_mul(7)) as u8 ^ seed
}

/// The bytes of a `pattern` write of `len` bytes at `addr`, for a mapping
/// that starts at `origin`.
pub fn pattern_bytes(origin: u64, addr: u64, len: u64, seed: u8) -> Vec<u8> {
    (addr..addr + len).map(|a| pattern_byte(a - origin, seed)).collect()
}

/// What a trace sees of one page ([`Op::Peek`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Peek {
    pub page: PageInfo,
    /// The byte at the address.
    pub byte: u8,
    /// The page cache holds an uptodate folio for the file page behind the
    /// address (`mincore` of a file mapping; of a hugetlb mapping, which
    /// `mincore` answers from the entry, that the entry maps a page);
    /// false for anonymous memory.
    #[serde(default)]
    pub cached: bool,
    /// The mapcount design's raw fields of the page's large folio, by
    /// Linux's names (the model only).
    pub fields: Vec<(String, i64)>,
}

/// Which kind of GUP reference a `pin`/`get` step takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GupKind {
    /// FOLL_GET, read-only (what `vmsplice()` takes).
    Get,
    /// FOLL_PIN, optionally FOLL_WRITE and FOLL_LONGTERM.
    Pin { write: bool, longterm: bool },
}

/// The reference by its GUP flags (`FOLL_PIN | FOLL_WRITE`, ...).
impl std::fmt::Display for GupKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            GupKind::Get => write!(f, "FOLL_GET"),
            GupKind::Pin { write, longterm } => {
                write!(
                    f,
                    "FOLL_PIN{}{}",
                    if write { " | FOLL_WRITE" } else { "" },
                    if longterm { " | FOLL_LONGTERM" } else { "" }
                )
            }
        }
    }
}

/// What kind of file a scenario makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum FileKind {
    /// `memfd_create` (the internal shm mount, whose `huge` follows
    /// `shmem_enabled`).
    Memfd,
    /// A file on a tmpfs mount of its own with option `huge=`; `named`
    /// false for an `O_TMPFILE` file, which has no name.
    Tmpfs { huge: foliomm::internals::folio::thp::ShmemHuge, named: bool },
    /// `memfd_create(MFD_HUGETLB)` with the size flag of its pages: a
    /// hugetlbfs file.
    Hugetlbfs(HugeSize),
}

/// An `mmap` call: `at` is a hint, or the exact place with `fixed`; `file`
/// is a file handle and a byte offset, `None` for anonymous memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MmapRequest {
    pub at: Option<u64>,
    pub len: u64,
    pub prot: Prot,
    pub fixed: bool,
    pub populate: bool,
    pub shared: bool,
    /// `MAP_HUGETLB` with a page size (`MAP_HUGE_2MB`, `MAP_HUGE_1GB`).
    pub hugetlb: Option<HugeSize>,
    /// `MAP_NORESERVE`.
    pub noreserve: bool,
    /// `MAP_LOCKED`.
    #[serde(default)]
    pub locked: bool,
    pub file: Option<(u64, u64)>,
}

impl MmapRequest {
    /// Private anonymous memory of `len` bytes anywhere.
    pub fn anon(len: u64, prot: Prot) -> MmapRequest {
        MmapRequest {
            at: None,
            len,
            prot,
            fixed: false,
            populate: false,
            shared: false,
            hugetlb: None,
            noreserve: false,
            locked: false,
            file: None,
        }
    }
}
