//! The controller's side of the worker protocol: a socket per worker
//! thread, one JSON line per request and per answer. A socket that breaks
//! or an answer that makes no sense is a backend failure, never an errno.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

use foliomm_scenario::backend::{BackendResult, StepError, Thread};

use crate::{HostBackend, Request, Response};

/// The controller's end of one worker thread's socket.
pub(crate) type Conn = Arc<Mutex<BufReader<UnixStream>>>;

/// Writes `req` as one line of JSON.
fn write_request(s: &mut UnixStream, req: &Request) -> std::io::Result<()> {
    let mut line = serde_json::to_string(req).unwrap();
    line.push('\n');
    s.write_all(line.as_bytes())
}

/// A failure of the machinery (a worker, its socket), as a step error:
/// never an errno.
pub(crate) fn broken(what: impl std::fmt::Display) -> StepError {
    StepError::Backend(what.to_string())
}

impl HostBackend {
    /// Runs `trigger` (which makes a worker thread connect), then accepts
    /// the connection and checks that it says it is `name`.
    pub(crate) fn connect(&self, name: &str, trigger: impl FnOnce() -> BackendResult<()>) -> BackendResult<Conn> {
        let listener = self.listener.lock().unwrap();
        let listener = listener.as_ref().ok_or_else(|| broken("the host backend is not started"))?;
        trigger()?;
        let (s, _) = listener.accept().map_err(|e| broken(format!("accepting worker {name}: {e}")))?;
        let mut conn = BufReader::new(s);
        let mut line = String::new();
        conn.read_line(&mut line).map_err(|e| broken(format!("reading worker {name}'s hello: {e}")))?;
        match serde_json::from_str(&line) {
            Ok(Request::Hello { name: n }) if n == name => Ok(Arc::new(Mutex::new(conn))),
            _ => Err(broken(format!("expected worker {name} to connect, got {:?}", line.trim()))),
        }
    }

    pub(crate) fn conn(&self, t: Thread) -> BackendResult<Conn> {
        let procs = self.procs.read().unwrap();
        let w = procs.get(t.proc).ok_or_else(|| broken(format!("no process {}", t.proc)))?;
        w.threads.get(&t.tid).cloned().ok_or_else(|| broken(format!("no thread {t}")))
    }

    /// Sends `req` to thread `t` and waits for its answer. A socket that
    /// breaks, or an answer that makes no sense, is a backend failure.
    pub(crate) fn request(&self, t: Thread, req: &Request) -> BackendResult<Response> {
        let conn = self.conn(t)?;
        let mut conn = conn.lock().unwrap();
        write_request(conn.get_mut(), req).map_err(|e| broken(format!("worker {t} went away: {e}")))?;
        let mut line = String::new();
        match conn.read_line(&mut line) {
            Ok(0) => return Err(broken(format!("worker {t} closed its socket during {req:?}"))),
            Err(e) => return Err(broken(format!("worker {t}: {e}"))),
            Ok(_) => {}
        }
        match serde_json::from_str(&line) {
            Ok(Response::Err(e)) => Err(StepError::Errno(e)),
            Ok(Response::OsError(n)) => Err(StepError::Unsupported(format!(
                "the host kernel failed {req:?} with errno {n} ({}), which foliomm does not model",
                std::io::Error::from_raw_os_error(n)
            ))),
            Ok(Response::Unobservable(why)) => Err(StepError::Unsupported(why)),
            Ok(r) => Ok(r),
            Err(e) => Err(broken(format!("worker {t} answered {:?}: {e}", line.trim()))),
        }
    }

    pub(crate) fn value(&self, t: Thread, req: Request) -> BackendResult<u64> {
        match self.request(t, &req)? {
            Response::Value(v) => Ok(v),
            r => Err(broken(format!("worker {t} answered {req:?} with {r:?}"))),
        }
    }

    /// Sends `req` without waiting for an answer (`Exit` has none).
    pub(crate) fn send(conn: &Conn, req: &Request) -> std::io::Result<()> {
        write_request(conn.lock().unwrap().get_mut(), req)
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
