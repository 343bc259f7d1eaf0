//! What a scan measured: one [`PointResult`] per (topology, thread count, message size, sender),
//! the figures the table, the CSV and the plots are made of.

use serde::{Deserialize, Serialize};

/// What carried the bytes of a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sender {
    /// pipestream's own messages: header, sequence number, optional checksum, acknowledged.
    Pipestream,
    /// The baseline: the same processes, connections and write sizes, plain bytes, no header,
    /// no acknowledgement, no check.
    RawTcp,
    /// The baseline of a tool everyone has: `iperf3`, as many parallel streams as the point has
    /// connections, writes of the message size (loopback only).
    Iperf3,
}

impl Sender {
    /// Its name in tables, CSV and legends.
    pub fn name(self) -> &'static str {
        match self {
            Sender::Pipestream => "pipestream",
            Sender::RawTcp => "raw-tcp",
            Sender::Iperf3 => "iperf3",
        }
    }
}

/// The figures of one point of a scan, over its measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PointResult {
    /// Clients (N).
    pub clients: u32,
    /// Servers (M).
    pub servers: u32,
    /// Whether client i and server i shared a process (and a host).
    pub folded: bool,
    /// Threads servicing the transmissions, per process.
    pub threads: u32,
    /// Bytes of each message (its payload; pipestream adds a 32-byte header).
    pub message_bytes: u32,
    /// What carried the bytes.
    pub sender: Sender,
    /// Length of the measured window, in seconds.
    pub seconds: f64,
    /// Messages completed in the window, over all clients: acknowledged by their server
    /// (pipestream), or payload bytes received divided by the message size (baselines).
    pub messages: u64,
    /// Payload bytes completed in the window, over all clients.
    pub bytes: u64,
    /// CPU time of every process of the point over the window (clients and servers), divided
    /// by `messages`: none for iperf3, whose CPU is not sampled the same way.
    pub cpu_ns_per_message: Option<f64>,
    /// Messages found lost, duplicated, out of order or corrupt by the servers over the whole
    /// point (pipestream only; zero for a sound transport).
    pub errors: u64,
    /// The sockets' send and receive buffers, in bytes: the file's `buffer_bytes` for
    /// pipestream; for raw TCP, those of the better of its two measurements (the file's, and
    /// what pipestream keeps in flight, `burst` × the message); none for iperf3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_buffer_bytes: Option<u32>,
}

impl PointResult {
    /// "NxM", or "NxM folded".
    pub fn topology(&self) -> String {
        format!("{}x{}{}", self.clients, self.servers, if self.folded { " folded" } else { "" })
    }

    /// Payload throughput of all clients together, in Gb/s.
    pub fn total_gbps(&self) -> f64 {
        if self.seconds > 0.0 { self.bytes as f64 * 8.0 / self.seconds / 1e9 } else { 0.0 }
    }

    /// The study's figure: the average client's payload throughput, in Gb/s.
    pub fn client_gbps(&self) -> f64 {
        self.total_gbps() / f64::from(self.clients.max(1))
    }

    /// Messages completed per second, over all clients.
    pub fn messages_per_s(&self) -> f64 {
        if self.seconds > 0.0 { self.messages as f64 / self.seconds } else { 0.0 }
    }
}
