//! An instance's part of one scan point ([`Assignment`]), and the checks it must pass before
//! anything is bound: it comes over REST, so it is held to the same bounds as the file.

use super::EngineError;
use crate::config::{BUFFER_BYTES_RANGE, MAX_BURST, MAX_PEERS, MAX_THREADS, MESSAGE_BYTES_RANGE, Policy, Transport};
use serde::{Deserialize, Serialize};

/// What carries the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// pipestream's messages.
    Pipestream,
    /// The raw-TCP baseline: payload bytes only, no header, acknowledgement or check.
    RawTcp,
}

/// An instance's server, as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPart {
    /// The server's index (j).
    pub index: u32,
    /// Where it listens, `host:port` (port 0: any free one).
    pub listen: String,
    /// The hosts of the clients, all of them: only their addresses may connect.
    pub client_hosts: Vec<String>,
}

/// An instance's part of one scan point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// The point: hellos of another session are refused.
    pub session: u64,
    /// What carries the bytes.
    pub mode: Mode,
    /// Clients of the point (N).
    pub clients: u32,
    /// Servers of the point (M).
    pub servers: u32,
    /// Payload bytes of a message.
    pub message_bytes: u32,
    /// Socket buffer bytes per connection, and the most a read takes.
    pub buffer_bytes: u32,
    /// Messages in flight per connection.
    pub burst: u32,
    /// Threads servicing the connections.
    pub threads: u32,
    /// Cores the threads are pinned to, in turn.
    pub affinity: Vec<usize>,
    /// How the client picks its next message.
    pub policy: Policy,
    /// The fair policy's window, in messages.
    pub fair_window: u32,
    /// Whether messages carry a checksum.
    pub checksum: bool,
    /// This instance's client index, if it has a client.
    pub client: Option<u32>,
    /// This instance's server, if it has one.
    pub server: Option<ServerPart>,
    /// What pipestream's messages travel on.
    #[serde(default)]
    pub transport: Transport,
    /// UCX's transports (as `UCX_TLS` lists them, e.g. `tcp` or `sm,self`); none: UCX's choice.
    #[serde(default)]
    pub ucx_transports: Option<String>,
}

impl Assignment {
    /// Whether its messages travel on UCX (the raw-TCP baseline never does).
    pub(super) fn over_ucx(&self) -> bool {
        self.transport == Transport::Ucx && self.mode == Mode::Pipestream
    }

    /// Refuses an assignment out of bounds, naming the key, or one this build cannot carry out.
    pub(super) fn check(&self) -> Result<(), EngineError> {
        // The same bounds as the file's: an assignment comes over REST from anyone on loopback.
        let within = |what: &str, v: u32, (lo, hi): (u32, u32)| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(EngineError::Assignment(format!("{what} {v}: must be {lo}..={hi}")))
            }
        };
        within("message_bytes", self.message_bytes, MESSAGE_BYTES_RANGE)?;
        within("buffer_bytes", self.buffer_bytes, BUFFER_BYTES_RANGE)?;
        within("burst", self.burst, (1, MAX_BURST))?;
        within("threads", self.threads, (1, MAX_THREADS))?;
        within("clients", self.clients, (1, MAX_PEERS))?;
        within("servers", self.servers, (1, MAX_PEERS))?;
        within("fair_window", self.fair_window, (1, u32::MAX))?;
        if self.client.is_some_and(|c| c >= self.clients)
            || self.server.as_ref().is_some_and(|s| s.index >= self.servers)
        {
            return Err(EngineError::Assignment("client or server index beyond the topology".into()));
        }
        if self.over_ucx() && !tessera_ucx::ENABLED {
            return Err(EngineError::Assignment(
                "transport ucx: this tessera was built without UCX (build it with `--features ucx`)".into(),
            ));
        }
        Ok(())
    }
}
