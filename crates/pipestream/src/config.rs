//! A pipestream file: the topology, the message parameters, what to scan and where the results
//! go, in one YAML file read with the same file:line:key errors as a system file.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use tessera_config::yaml;
use tessera_config::{ConfigErrors, Problems, ValidationError};

/// Most clients or servers of a topology.
pub const MAX_PEERS: u32 = 256;
/// Most threads servicing an instance's transmissions.
pub const MAX_THREADS: u32 = 64;
/// Smallest and largest message payload, in bytes.
pub const MESSAGE_BYTES_RANGE: (u32, u32) = (1, 64 << 20);
/// Most messages in flight on one connection.
pub const MAX_BURST: u32 = 4096;
/// Smallest and largest buffer per connection, in bytes.
pub const BUFFER_BYTES_RANGE: (u32, u32) = (4 << 10, 256 << 20);
/// Most points of one scan (sizes × thread counts × topologies).
pub const MAX_SCAN_POINTS: usize = 1024;

/// What a point's messages travel on (the raw-TCP baseline is always TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// TCP sockets.
    #[default]
    Tcp,
    /// UCX active messages (a build with the feature `ucx`).
    Ucx,
}

/// How a client chooses its next message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// The next message goes out as soon as a connection has room: to the next server in
    /// turn that can take one.
    #[default]
    BestEffort,
    /// Strictly in turn, and no client more than `fair_window` messages ahead of the slowest
    /// client at any server: every client waits for the others.
    Fair,
}

/// One topology: N clients and M servers, folded (client i and server i in one instance) or
/// not (each in its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// Clients.
    pub clients: u32,
    /// Servers.
    pub servers: u32,
    /// Client i and server i share instance i.
    pub folded: bool,
}

impl Topology {
    /// Instances (processes) the topology needs.
    pub fn instances(&self) -> u32 {
        if self.folded { self.clients.max(self.servers) } else { self.clients + self.servers }
    }

    /// The instance of client `i`.
    pub fn client_instance(&self, i: u32) -> u32 {
        i
    }

    /// The instance of server `j`.
    pub fn server_instance(&self, j: u32) -> u32 {
        if self.folded { j } else { self.clients + j }
    }

    /// "NxM", with " folded" when folded.
    pub fn name(&self) -> String {
        format!("{}x{}{}", self.clients, self.servers, if self.folded { " folded" } else { "" })
    }

    /// Parses "NxM" (the folding is the file's).
    fn parse(text: &str, folded: bool) -> Option<Topology> {
        let (n, m) = text.split_once(['x', 'X'])?;
        Some(Topology { clients: n.trim().parse().ok()?, servers: m.trim().parse().ok()?, folded })
    }
}

/// What a scan walks through; an empty list means the one value of the file's key.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScanSection {
    /// Message sizes, in bytes.
    pub message_bytes: Vec<u32>,
    /// Thread counts.
    pub threads: Vec<u32>,
    /// Topologies as "NxM" (folded as the file's `folded` says).
    pub topologies: Vec<String>,
}

/// Which baselines a scan measures beside pipestream, in the same run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BaselineSection {
    /// Plain TCP streams: the same instances, connections, threads and write sizes, no header,
    /// acknowledgement or check.
    pub raw_tcp: bool,
    /// `iperf3` with as many streams as connections, when it is installed and every host is
    /// this one (it runs on loopback only).
    pub iperf3: bool,
}

impl Default for BaselineSection {
    fn default() -> Self {
        BaselineSection { raw_tcp: true, iperf3: true }
    }
}

/// A pipestream file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PipestreamConfig {
    /// Where the instances run, in turn: instance i on `hosts[i % len]`. `localhost` (or a
    /// loopback address) runs them as processes of this host; any other host through its
    /// `tessera agent` on `agent_port`.
    pub hosts: Vec<String>,
    /// Clients (N).
    pub clients: u32,
    /// Servers (M).
    pub servers: u32,
    /// Client i and server i share an instance (the study's folded layout).
    pub folded: bool,
    /// Payload bytes of a message.
    pub message_bytes: u32,
    /// Bytes per connection: its socket buffers, and the server's receive buffer.
    pub buffer_bytes: u32,
    /// Messages in flight per connection: sent and not yet acknowledged.
    pub burst: u32,
    /// Threads servicing an instance's transmissions; its connections are dealt to them in
    /// turn.
    pub threads: u32,
    /// CPU cores the threads of an instance are pinned to, in turn; empty: not pinned.
    pub affinity: Vec<usize>,
    /// How a client chooses its next message.
    pub policy: Policy,
    /// Under the fair policy, how many messages a client may be ahead of the slowest client
    /// at a server.
    pub fair_window: u32,
    /// Whether each message carries a CRC-32C of its sequence number and payload, checked by
    /// its server.
    pub checksum: bool,
    /// What pipestream's messages travel on: `tcp`, or `ucx` (UCX active messages; a build
    /// with the feature `ucx`). The raw-TCP baseline is TCP either way.
    pub transport: Transport,
    /// UCX's transports, as `UCX_TLS` lists them (`tcp`, `sm,self`, ...); absent: UCX's own
    /// choice (or `UCX_TLS`).
    pub ucx_transports: Option<String>,
    /// Measured window of each point, in seconds.
    pub duration_s: f64,
    /// Time each point runs before its window opens, in seconds.
    pub warmup_s: f64,
    /// Port of a server's data listener; 0 takes a free one (reported back to the driver).
    pub data_port: u16,
    /// The speed of a link, in Gb/s, drawn dashed on the plots.
    pub link_gbps: Option<f64>,
    /// The port of `tessera agent` on every host that is not this one.
    pub agent_port: Option<u16>,
    /// How long an instance may take to start, connect or drain, in seconds.
    pub timeout_s: f64,
    /// Where a scan writes its CSV, table and plots (a directory, created).
    pub output: PathBuf,
    /// What a scan walks through.
    pub scan: ScanSection,
    /// Baselines measured in the same run.
    pub baselines: BaselineSection,
}

impl Default for PipestreamConfig {
    fn default() -> Self {
        PipestreamConfig {
            hosts: vec!["localhost".into()],
            clients: 2,
            servers: 2,
            folded: false,
            message_bytes: 64 << 10,
            buffer_bytes: 4 << 20,
            burst: 8,
            threads: 1,
            affinity: Vec::new(),
            policy: Policy::BestEffort,
            fair_window: 4,
            checksum: false,
            transport: Transport::Tcp,
            ucx_transports: None,
            duration_s: 2.0,
            warmup_s: 0.5,
            data_port: 0,
            link_gbps: None,
            agent_port: None,
            timeout_s: 20.0,
            output: PathBuf::from("pipestream-out"),
            scan: ScanSection::default(),
            baselines: BaselineSection::default(),
        }
    }
}

/// Whether `host` is this host: `localhost` or a loopback address.
pub fn is_local(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl PipestreamConfig {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<PipestreamConfig, ConfigErrors> {
        PipestreamConfig::from_yaml(&yaml::read_text(path)?, path)
    }

    /// Reads and checks `text`, the contents of `origin`.
    pub fn from_yaml(text: &str, origin: &Path) -> Result<PipestreamConfig, ConfigErrors> {
        yaml::read_yaml(text, origin, PipestreamConfig::problems)
    }

    /// The message sizes a scan walks through.
    pub fn scan_message_bytes(&self) -> Vec<u32> {
        if self.scan.message_bytes.is_empty() { vec![self.message_bytes] } else { self.scan.message_bytes.clone() }
    }

    /// The thread counts a scan walks through.
    pub fn scan_threads(&self) -> Vec<u32> {
        if self.scan.threads.is_empty() { vec![self.threads] } else { self.scan.threads.clone() }
    }

    /// The topologies a scan walks through (checked by [`PipestreamConfig::load`]).
    pub fn scan_topologies(&self) -> Vec<Topology> {
        let own = Topology { clients: self.clients, servers: self.servers, folded: self.folded };
        if self.scan.topologies.is_empty() {
            return vec![own];
        }
        self.scan.topologies.iter().filter_map(|t| Topology::parse(t, self.folded)).collect()
    }

    /// Whether every host is this one.
    pub fn all_local(&self) -> bool {
        self.hosts.iter().all(|h| is_local(h))
    }

    /// Every problem of the file.
    pub fn problems(&self) -> Vec<ValidationError> {
        let mut p = Problems::default();
        if self.hosts.is_empty() {
            p.add("hosts", "must name at least one host");
        }
        for (i, host) in self.hosts.iter().enumerate() {
            if host.is_empty() || host.contains(char::is_whitespace) {
                p.add(format!("hosts[{i}]"), format!("{host:?} is not a host name"));
            }
        }
        // Named at the first host that needs an agent, which has a line in the file (a missing
        // `agent_port` has none).
        if self.agent_port.is_none()
            && let Some(i) = self.hosts.iter().position(|h| !h.is_empty() && !is_local(h))
        {
            p.add(
                format!("hosts[{i}]"),
                format!(
                    "{:?} is not this host: its instances are started through its `tessera agent`, so set \
                     agent_port to the agents' port",
                    self.hosts[i]
                ),
            );
        }
        if self.agent_port == Some(0) {
            p.add("agent_port", "0 is no port an agent can be reached at");
        }
        let topology = |key: String, t: Topology, p: &mut Problems| {
            if !(1..=MAX_PEERS).contains(&t.clients) || !(1..=MAX_PEERS).contains(&t.servers) {
                p.add(key, format!("clients and servers must be 1..={MAX_PEERS}"));
            }
        };
        for (key, v) in [("clients", self.clients), ("servers", self.servers)] {
            if !(1..=MAX_PEERS).contains(&v) {
                p.add(key, format!("must be 1..={MAX_PEERS}"));
            }
        }
        for (i, text) in self.scan.topologies.iter().enumerate() {
            match Topology::parse(text, self.folded) {
                Some(t) => topology(format!("scan.topologies[{i}]"), t, &mut p),
                None => p.add(format!("scan.topologies[{i}]"), format!("{text:?} is not \"NxM\" (clients x servers)")),
            }
        }
        let sizes = |key: String, v: u32, p: &mut Problems| {
            let (lo, hi) = MESSAGE_BYTES_RANGE;
            if !(lo..=hi).contains(&v) {
                p.add(key, format!("{v} bytes: must be {lo}..={hi}"));
            }
        };
        sizes("message_bytes".into(), self.message_bytes, &mut p);
        for (i, &v) in self.scan.message_bytes.iter().enumerate() {
            sizes(format!("scan.message_bytes[{i}]"), v, &mut p);
        }
        let threads = |key: String, v: u32, p: &mut Problems| {
            if !(1..=MAX_THREADS).contains(&v) {
                p.add(key, format!("must be 1..={MAX_THREADS}"));
            }
        };
        threads("threads".into(), self.threads, &mut p);
        for (i, &v) in self.scan.threads.iter().enumerate() {
            threads(format!("scan.threads[{i}]"), v, &mut p);
        }
        let (lo, hi) = BUFFER_BYTES_RANGE;
        if !(lo..=hi).contains(&self.buffer_bytes) {
            p.add("buffer_bytes", format!("must be {lo}..={hi}"));
        }
        if !(1..=MAX_BURST).contains(&self.burst) {
            p.add("burst", format!("must be 1..={MAX_BURST}"));
        }
        if self.transport == Transport::Ucx && !tessera_ucx::ENABLED {
            p.add("transport", "ucx: this tessera was built without UCX (build it with `--features ucx`)");
        }
        if self.ucx_transports.as_ref().is_some_and(|t| t.trim().is_empty() || t.contains(char::is_whitespace)) {
            p.add("ucx_transports", "a list such as `tcp` or `sm,self`, without spaces");
        }
        if self.fair_window == 0 {
            p.add("fair_window", "must be at least 1");
        }
        if !(self.duration_s.is_finite() && self.duration_s > 0.0 && self.duration_s <= 3600.0) {
            p.add("duration_s", "must be above 0 and at most 3600");
        }
        if !(self.warmup_s.is_finite() && (0.0..=600.0).contains(&self.warmup_s)) {
            p.add("warmup_s", "must be 0..=600");
        }
        if !(self.timeout_s.is_finite() && self.timeout_s >= 1.0 && self.timeout_s <= 3600.0) {
            p.add("timeout_s", "must be 1..=3600");
        }
        if let Some(g) = self.link_gbps
            && !(g.is_finite() && g > 0.0)
        {
            p.add("link_gbps", "must be above 0");
        }
        let points = self.scan_message_bytes().len() * self.scan_threads().len() * self.scan_topologies().len().max(1);
        if points > MAX_SCAN_POINTS {
            p.add("scan", format!("{points} points: at most {MAX_SCAN_POINTS}"));
        }
        if self.output.as_os_str().is_empty() {
            p.add("output", "must name a directory");
        }
        p.into_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<PipestreamConfig, ConfigErrors> {
        PipestreamConfig::from_yaml(text, Path::new("ps.yaml"))
    }

    #[test]
    fn defaults_read_and_scan_lists_fall_back_to_the_single_values() {
        let c = read("clients: 4\nservers: 3\nfolded: true\n").unwrap();
        assert_eq!(c.scan_topologies(), vec![Topology { clients: 4, servers: 3, folded: true }]);
        assert_eq!(c.scan_message_bytes(), vec![64 << 10]);
        assert_eq!(Topology { clients: 4, servers: 3, folded: true }.instances(), 4);
        assert_eq!(Topology { clients: 4, servers: 3, folded: false }.server_instance(1), 5);
    }

    #[test]
    fn a_wrong_key_and_wrong_values_are_named_with_their_lines() {
        let e = read("clients: 2\nburts: 3\n").unwrap_err().to_string();
        assert!(e.contains("ps.yaml:2") && e.contains("burts"), "{e}");
        let e = read("threads: 0\nscan:\n  topologies: [2x2, four]\n").unwrap_err().to_string();
        assert!(e.contains("ps.yaml:1") && e.contains("threads"), "{e}");
        assert!(e.contains("scan.topologies[1]") && e.contains("\"four\""), "{e}");
        let e = read("clients: 2\nhosts: [localhost, bu-host-1]\n").unwrap_err().to_string();
        assert!(e.contains("ps.yaml:2") && e.contains("hosts[1]") && e.contains("agent_port"), "{e}");
        let e = read("hosts:\n  - localhost\n  - 10.1.2.3\nagent_port: 0\n").unwrap_err().to_string();
        assert!(e.contains("ps.yaml:4") && e.contains("agent_port"), "{e}");
        let e = read("hosts:\n  - localhost\n  - 10.1.2.3\n").unwrap_err().to_string();
        assert!(e.contains("ps.yaml:3") && e.contains("\"10.1.2.3\"") && e.contains("agent_port"), "{e}");
        read("hosts: [127.0.0.1, localhost]\n").unwrap();
    }
}
