//! The I/O of one instance: its server's listener, its connections, and the threads that
//! service them, driving the cores of [`crate::core`].
//!
//! An instance is configured with its part of a scan point ([`Assignment`]), which binds its
//! server's listener ([`Engine::configure`]); then it connects ([`Engine::connect`]): its
//! client calls every server and says hello, its server accepts one connection from each client
//! and checks the hello (the session must be this point's, the address one of the clients'
//! hosts). The connections are then dealt to the instance's threads in turn, each thread a
//! `mio` loop over its share; [`Engine::start`] lets the clients send, [`Engine::stop`] stops
//! them and waits until every message sent has been acknowledged. Figures are kept in shared
//! counters ([`Counters`]) that run control reads at any time.
//!
//! Writes are vectored: a connection's queued messages go out as their headers and the one
//! payload buffer of the instance, many messages a call, so that a small message costs a
//! header's worth of copying. Every wait is bounded: connecting and draining by the time-out
//! the driver gives, a thread's poll by [`POLL_WAIT`].
//!
//! | module | job |
//! |---|---|
//! | `assignment` | the [`Assignment`] and its checks |
//! | `counters` | the [`Counters`] and their [`Figures`] |
//! | `sockets` | addresses and TCP sockets, for both sides |
//! | `client` | calling the servers; sending, and reading acknowledgements |
//! | `server` | the listener and acceptor; reading messages, and acknowledging them |
//! | `worker` | the threads, each a `mio` loop over its share of the connections |
//! | `ucx` | the same over UCX active messages (the feature `ucx`) |

mod assignment;
mod client;
mod counters;
mod server;
mod sockets;
#[cfg(test)]
mod tests;
#[cfg(feature = "ucx")]
mod ucx;
mod worker;

pub use crate::config::Transport;
pub use assignment::{Assignment, Mode, ServerPart};
pub use counters::{Counters, Figures};

use crate::core::Sender;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest a thread's poll waits before it looks at its phase again.
pub const POLL_WAIT: Duration = Duration::from_millis(2);

/// Why an instance cannot go on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A socket call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
    /// Something took longer than it may.
    #[error("{0}")]
    Timeout(String),
    /// The assignment cannot be carried out.
    #[error("{0}")]
    Assignment(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> EngineError {
    let what = what.into();
    move |source| EngineError::Io { what, source }
}

const PHASE_IDLE: u8 = 0;
const PHASE_RUNNING: u8 = 1;
const PHASE_STOPPING: u8 = 2;
const PHASE_EXIT: u8 = 3;

/// What the threads share.
struct Shared {
    phase: AtomicU8,
    counters: Arc<Counters>,
    /// Threads that have drained since the last stop.
    drained: AtomicU64,
    /// Messages this instance's server has received from each client, for the fair floor.
    from_client: Vec<AtomicU64>,
    /// The first error of any thread.
    error: Mutex<Option<String>>,
}

impl Shared {
    fn fail(&self, why: String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(why);
        }
    }

    /// The phase now; a stopping phase stops `sender`, which starts no message any more.
    fn phase_for(&self, sender: &mut Sender) -> u8 {
        let phase = self.phase.load(Ordering::SeqCst);
        if phase == PHASE_STOPPING {
            sender.stop();
        }
        phase
    }

    fn floor(&self) -> u64 {
        self.from_client.iter().map(|c| c.load(Ordering::Relaxed)).min().unwrap_or(0)
    }
}

/// One instance's engine.
pub struct Engine {
    assignment: Assignment,
    #[cfg(feature = "ucx")]
    ucx: Option<ucx::UcxThreads>,
    listener: Option<TcpListener>,
    data_address: Option<SocketAddr>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Engine {
    /// Takes `assignment`: checks it and binds its server's listener.
    pub fn configure(assignment: Assignment) -> Result<Engine, EngineError> {
        let a = &assignment;
        a.check()?;
        let over_ucx = a.over_ucx();
        let (listener, data_address) = match &a.server {
            _ if over_ucx => (None, None),
            None => (None, None),
            Some(s) => {
                let (listener, bound) = server::listen(s, a.buffer_bytes)?;
                (Some(listener), Some(bound))
            }
        };
        let shared = Arc::new(Shared {
            phase: AtomicU8::new(PHASE_IDLE),
            counters: Arc::new(Counters::default()),
            drained: AtomicU64::new(0),
            from_client: (0..a.clients).map(|_| AtomicU64::new(0)).collect(),
            error: Mutex::new(None),
        });
        #[cfg(feature = "ucx")]
        let ucx = if over_ucx { Some(ucx::UcxThreads::start(&assignment, &shared)?) } else { None };
        Ok(Engine {
            assignment,
            #[cfg(feature = "ucx")]
            ucx,
            listener,
            data_address,
            shared,
            threads: Vec::new(),
        })
    }

    /// Its UCX worker addresses, one per thread, when its messages travel on UCX.
    pub fn ucx_addresses(&self) -> Vec<Vec<u8>> {
        #[cfg(feature = "ucx")]
        if let Some(u) = &self.ucx {
            return u.addresses.clone();
        }
        Vec::new()
    }

    /// The address the server listens on, if the instance has one.
    pub fn data_address(&self) -> Option<SocketAddr> {
        self.data_address
    }

    /// The assignment.
    pub fn assignment(&self) -> &Assignment {
        &self.assignment
    }

    /// The counters, which stay valid after the engine is gone.
    pub fn counters(&self) -> Arc<Counters> {
        self.shared.counters.clone()
    }

    /// The first error a thread met, if any.
    pub fn error(&self) -> Option<String> {
        self.shared.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Connects: the client to every server (`servers[j]`, in order), the server to one
    /// connection of each client; then starts the threads, idle until [`Engine::start`].
    pub fn connect(&mut self, servers: &[SocketAddr], timeout: Duration) -> Result<(), EngineError> {
        self.connect_over(servers, &[], timeout)
    }

    /// [`Engine::connect`], over UCX when the assignment says so: `ucx_servers[j]` are server
    /// j's worker addresses ([`Engine::ucx_addresses`]).
    pub fn connect_over(
        &mut self,
        servers: &[SocketAddr],
        ucx_servers: &[Vec<Vec<u8>>],
        timeout: Duration,
    ) -> Result<(), EngineError> {
        let a = self.assignment.clone();
        #[cfg(feature = "ucx")]
        if let Some(u) = &mut self.ucx {
            u.connect(&a, ucx_servers, timeout)?;
            self.threads.append(&mut u.threads);
            return Ok(());
        }
        let _ = ucx_servers;
        if a.client.is_some() && servers.len() != a.servers as usize {
            return Err(EngineError::Assignment(format!(
                "{} server addresses for {} servers",
                servers.len(),
                a.servers
            )));
        }
        let deadline = Instant::now() + timeout;
        // The server accepts on a thread of its own while this instance's client calls out.
        let acceptor = match (self.listener.take(), &a.server) {
            (Some(listener), Some(part)) => {
                Some(server::start_acceptor(listener, &a, part, self.shared.counters.clone(), deadline)?)
            }
            _ => None,
        };
        let client_conns = match a.client {
            Some(client) => client::call_servers(&a, client, servers, deadline)?,
            None => Vec::new(),
        };
        let server_conns = match acceptor {
            Some(t) => t.join().map_err(|_| EngineError::Assignment("the acceptor panicked".into()))??,
            None => Vec::new(),
        };
        worker::start_workers(&a, &self.shared, client_conns, server_conns, &mut self.threads)
    }

    /// Lets the clients send.
    pub fn start(&self) {
        self.shared.drained.store(0, Ordering::SeqCst);
        self.shared.phase.store(PHASE_RUNNING, Ordering::SeqCst);
    }

    /// Stops the clients and waits, at most `timeout`, until every message they sent has been
    /// acknowledged (raw: written whole).
    pub fn stop(&self, timeout: Duration) -> Result<(), EngineError> {
        self.shared.phase.store(PHASE_STOPPING, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        while self.shared.drained.load(Ordering::SeqCst) < self.threads.len() as u64 {
            if let Some(e) = self.error() {
                return Err(EngineError::Assignment(e));
            }
            if Instant::now() >= deadline {
                return Err(EngineError::Timeout(format!(
                    "the clients did not drain within {:.1} s",
                    timeout.as_secs_f64()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.phase.store(PHASE_EXIT, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The payload every message of a run carries: a pattern that no byte-shift leaves unchanged.
fn payload(bytes: u32) -> Vec<u8> {
    (0..bytes).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}
