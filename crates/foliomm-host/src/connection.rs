//! The controller's side of the worker protocol: a socket per worker
//! thread, one JSON line per call and per answer. A socket that breaks or
//! an answer that makes no sense is a machinery failure, never an errno.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use foliomm_scenario::backend::Thread;
use foliomm_scenario::error::{BackendResult, Machinery, StepError};
use foliomm_scenario::op::{Op, Reply};

use crate::protocol::{Answer, Call, Hello, Refused};
use crate::HostBackend;

/// The controller's end of one worker thread's socket.
pub(crate) type Conn = Arc<Mutex<BufReader<UnixStream>>>;

/// Writes `call` as one line of JSON.
fn write_call(s: &mut UnixStream, call: &Call) -> std::io::Result<()> {
    let mut line = serde_json::to_string(call).unwrap();
    line.push('\n');
    s.write_all(line.as_bytes())
}

/// A backend that could not be set up (a directory, a socket, a program,
/// a sysfs file it cannot read).
pub(crate) fn setup(what: impl std::fmt::Display) -> StepError {
    StepError::Machinery(Machinery::Setup(what.to_string()))
}

/// A variant name of `op` for messages (no arguments: a pwrite's data can
/// be large).
fn op_name(op: &Op) -> String {
    let debug = format!("{op:?}");
    debug.split([' ', '(', '{']).next().unwrap_or_default().to_string()
}

impl HostBackend {
    /// Runs `trigger` (which makes a worker thread connect), then accepts
    /// the connection and checks that it says it is `name`.
    pub(crate) fn connect(&self, name: &str, trigger: impl FnOnce() -> BackendResult<()>) -> BackendResult<Conn> {
        let listener = self.listener.lock().unwrap();
        let listener = listener.as_ref().ok_or_else(|| setup("the host backend is not started"))?;
        trigger()?;
        let broken = |why: String| StepError::Machinery(Machinery::Worker { thread: name.into(), why });
        let (s, _) = listener.accept().map_err(|e| broken(format!("cannot accept its connection: {e}")))?;
        let mut conn = BufReader::new(s);
        let mut line = String::new();
        conn.read_line(&mut line).map_err(|e| broken(format!("reading its hello: {e}")))?;
        match serde_json::from_str(&line) {
            Ok(Hello { name: n }) if n == name => Ok(Arc::new(Mutex::new(conn))),
            _ => Err(broken(format!("another connected: {:?}", line.trim()))),
        }
    }

    pub(crate) fn conn(&self, t: Thread) -> BackendResult<Conn> {
        let procs = self.procs.read().unwrap();
        let w = procs.get(t.proc).ok_or_else(|| Machinery::NoProcess(t.proc.into()))?;
        w.threads.get(&t.tid).cloned().ok_or_else(|| t.failure("does not exist"))
    }

    /// Sends `op` for thread `tid` to worker thread `t` and waits for its
    /// answer. A socket that breaks, or an answer that makes no sense, is a
    /// machinery failure.
    pub(crate) fn request(&self, t: Thread, tid: u32, op: Op) -> BackendResult<Reply> {
        let conn = self.conn(t)?;
        let mut conn = conn.lock().unwrap();
        let broken = |why: String| StepError::Machinery(Machinery::Worker { thread: t.to_string(), why });
        let name = op_name(&op);
        write_call(conn.get_mut(), &Call { tid, op }).map_err(|e| broken(format!("went away: {e}")))?;
        let mut line = String::new();
        match conn.read_line(&mut line) {
            Ok(0) => return Err(broken(format!("closed its socket during {name}"))),
            Err(e) => return Err(broken(e.to_string())),
            Ok(_) => {}
        }
        match serde_json::from_str::<Answer>(&line) {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(Refused::Errno(e))) => Err(StepError::Errno(e)),
            Ok(Err(Refused::OsError(n))) => Err(StepError::Unsupported(format!(
                "the host kernel failed {name} with errno {n} ({}), which foliomm does not model",
                std::io::Error::from_raw_os_error(n)
            ))),
            Ok(Err(Refused::Unobservable(why))) => Err(StepError::Unsupported(why)),
            Ok(Err(Refused::Hangs(why))) => Err(StepError::Hangs(why)),
            Err(e) => Err(broken(format!("answered {:?}: {e}", line.trim()))),
        }
    }

    /// Sends `op` for thread `tid` without waiting for an answer (an exit
    /// has none).
    pub(crate) fn send(conn: &Conn, tid: u32, op: Op) -> std::io::Result<()> {
        write_call(conn.lock().unwrap().get_mut(), &Call { tid, op })
    }

    /// Waits until the worker at the other end of `conn` is gone (its
    /// socket closes after its address space is: do_exit runs exit_mm
    /// before exit_files).
    pub(crate) fn wait_closed(conn: &Conn) {
        let mut conn = conn.lock().unwrap();
        let mut rest = String::new();
        while conn.read_line(&mut rest).unwrap_or(0) > 0 {}
    }
}
