//! What the controller and a worker thread say to each other: one JSON
//! request per line, one JSON response per line, on the thread's own socket.

use foliomm::machine::HugeSize;
use foliomm::mm::Advice;
use foliomm::Errno;
use foliomm_scenario::backend::{Access, FileKind, GupKind, Observation};

/// A step sent to a worker.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub enum Request {
    Hello {
        name: String,
    },
    Mmap {
        at: Option<u64>,
        len: u64,
        prot: u32,
        fixed: bool,
        populate: bool,
        shared: bool,
        /// `MAP_HUGETLB` with the page size.
        hugetlb: Option<HugeSize>,
        noreserve: bool,
        /// A file descriptor and a byte offset; anonymous memory if none.
        file: Option<(u64, u64)>,
    },
    /// `memfd_create` or a tmpfs file, + `ftruncate`; answers the descriptor.
    CreateFile {
        kind: FileKind,
        size: u64,
    },
    Fallocate {
        fd: u64,
        offset: u64,
        len: u64,
        keep_size: bool,
    },
    Pwrite {
        fd: u64,
        offset: u64,
        data: Vec<u8>,
    },
    Pread {
        fd: u64,
        offset: u64,
        len: u64,
    },
    ObserveFile {
        fd: u64,
        offset: u64,
    },
    Ftruncate {
        fd: u64,
        size: u64,
    },
    /// `fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)`.
    PunchHole {
        fd: u64,
        offset: u64,
        len: u64,
    },
    Munmap {
        addr: u64,
        len: u64,
    },
    Mprotect {
        addr: u64,
        len: u64,
        prot: u32,
    },
    Madvise {
        addr: u64,
        len: u64,
        advice: Advice,
    },
    Mremap {
        addr: u64,
        len: u64,
        new_len: u64,
        to: Option<u64>,
    },
    Access {
        addr: u64,
        len: u64,
        access: Access,
    },
    Observe {
        addr: u64,
        len: u64,
    },
    Fork {
        child: String,
    },
    /// Take GUP references (handle `id`, chosen by the controller).
    Gup {
        id: u64,
        addr: u64,
        len: u64,
        kind: GupKind,
    },
    /// The first byte the references of `id` hold.
    GupByte {
        id: u64,
    },
    Ungup {
        id: u64,
    },
    /// Start thread `tid` of this process; it connects with its own socket.
    SpawnThread {
        tid: u32,
    },
    /// End this thread; on thread 0, the whole process.
    Exit,
}

/// A worker's answer.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub enum Response {
    Value(u64),
    Bytes(Vec<u8>),
    Observed(Observation),
    Err(Errno),
    /// A system call failed with an errno foliomm does not model.
    OsError(i32),
    /// The kernel does not show what was asked (why, in words).
    Unobservable(String),
}

impl Response {
    /// The last OS error as the model's errno, or its raw number when
    /// foliomm does not model it.
    pub fn os_error() -> Response {
        let n = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        match n {
            libc::ENOMEM => Response::Err(Errno::ENOMEM),
            libc::EFAULT => Response::Err(Errno::EFAULT),
            libc::EACCES => Response::Err(Errno::EACCES),
            libc::EBUSY => Response::Err(Errno::EBUSY),
            libc::EEXIST => Response::Err(Errno::EEXIST),
            libc::EINVAL => Response::Err(Errno::EINVAL),
            libc::EFBIG => Response::Err(Errno::EFBIG),
            n => Response::OsError(n),
        }
    }

    /// The answer to a system call that returned `r`: 0 is success, else
    /// the OS error.
    pub fn of_status(r: libc::c_int) -> Response {
        if r == 0 {
            Response::Value(0)
        } else {
            Response::os_error()
        }
    }
}
