//! Raw link baselines: one stream of messages between two threads of this process, with no
//! protocol, no framing and no check; what a transport moves at best on this machine, measured
//! in the same run as the event builder over it.
//!
//! - [`LinkKind::Tcp`]: one loopback TCP connection, the sender writing `message_bytes` a call
//!   from one buffer, the receiver reading into one buffer.
//! - [`LinkKind::Ucx`] (a build with the feature `ucx`): one UCX worker per thread, the sender
//!   sending active messages of `message_bytes` from memory mapped for UCX once, at most
//!   [`UCX_WINDOW`] in flight; the receiver's handler takes each whole (rendezvous messages into a
//!   buffer of the receiver's). A raw UCP stream of Tessera's own, in place of `ucx_perftest`
//!   (not packaged by Debian with libucx-dev).

use crate::BenchError;
use std::time::{Duration, Instant};

/// Message size of the baselines (a super-fragment of a dozen 4–8 kB fragments).
pub const LINK_MESSAGE_BYTES: usize = 64 << 10;
/// Most UCX messages in flight from the sender.
pub const UCX_WINDOW: usize = 32;

/// The transports compared: TCP, and with UCX in the build, UCX's TCP and its shared memory.
pub fn transports() -> Vec<LinkKind> {
    let mut kinds = vec![LinkKind::Tcp];
    if cfg!(feature = "ucx") {
        kinds.extend([LinkKind::Ucx("tcp"), LinkKind::Ucx("sm,self")]);
    }
    kinds
}

/// What a raw link runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// One loopback TCP connection.
    Tcp,
    /// UCX active messages on these transports (as `UCX_TLS` names them).
    Ucx(&'static str),
}

impl LinkKind {
    /// Its name in tables.
    pub fn label(&self) -> String {
        match self {
            LinkKind::Tcp => "raw TCP, 1 connection".into(),
            LinkKind::Ucx(t) => format!("raw UCP AM, UCX {t}"),
        }
    }

    /// UCX's transports, if it is UCX.
    pub fn ucx_transports(&self) -> Option<&'static str> {
        match self {
            LinkKind::Tcp => None,
            LinkKind::Ucx(t) => Some(t),
        }
    }
}

/// What a raw link moved.
#[derive(Debug, Clone)]
pub struct LinkMeasured {
    /// What it ran on.
    pub kind: LinkKind,
    /// Bytes of each message.
    pub message_bytes: usize,
    /// Bytes received.
    pub bytes: u64,
    /// Seconds from the first byte sent to the last received.
    pub seconds: f64,
}

impl LinkMeasured {
    /// Gigabytes per second received.
    pub fn gb_per_s(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-9) / 1e9
    }
}

/// Runs a raw link of `kind` for about `seconds`.
pub fn raw_link(kind: &LinkKind, message_bytes: usize, seconds: f64) -> Result<LinkMeasured, BenchError> {
    let run = Duration::from_secs_f64(seconds);
    let (bytes, took) = match kind {
        LinkKind::Tcp => tcp(message_bytes, run)?,
        LinkKind::Ucx(transports) => ucx(transports, message_bytes, run)?,
    };
    Ok(LinkMeasured { kind: *kind, message_bytes, bytes, seconds: took.as_secs_f64() })
}

fn tcp(message_bytes: usize, run: Duration) -> Result<(u64, Duration), BenchError> {
    use std::io::{Read, Write};
    let io = |what: &str| {
        let what = what.to_owned();
        move |source| BenchError::Io { what, source }
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(io("a raw TCP link's listener"))?;
    let at = listener.local_addr().map_err(io("a raw TCP link's listener"))?;
    let receiver = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut stream, _) = listener.accept()?;
        let mut buffer = vec![0u8; 1 << 20];
        let mut bytes = 0u64;
        loop {
            match stream.read(&mut buffer)? {
                0 => return Ok(bytes),
                n => bytes += n as u64,
            }
        }
    });
    let mut stream = std::net::TcpStream::connect(at).map_err(io("a raw TCP link"))?;
    let message = vec![0x5au8; message_bytes];
    let start = Instant::now();
    while start.elapsed() < run {
        stream.write_all(&message).map_err(io("writing a raw TCP link"))?;
    }
    drop(stream);
    let bytes = receiver
        .join()
        .map_err(|_| BenchError::System("a raw TCP link's receiver panicked".into()))?
        .map_err(io("reading a raw TCP link"))?;
    Ok((bytes, start.elapsed()))
}

#[cfg(not(feature = "ucx"))]
fn ucx(_: &str, _: usize, _: Duration) -> Result<(u64, Duration), BenchError> {
    Err(BenchError::BadCase("this build has no UCX: build it with `--features ucx`".into()))
}

#[cfg(feature = "ucx")]
fn ucx(transports: &str, message_bytes: usize, run: Duration) -> Result<(u64, Duration), BenchError> {
    use std::rc::Rc;
    use tessera_ucx::{Context, ErrorHandling, Event, MemRegion, Worker, WorkerAddress};
    const AM_DATA: u16 = 1;
    const AM_END: u16 = 2;
    // Every wait ends: the sender's run, then this long for the last messages.
    let drain = Duration::from_secs(10);
    let failed = |e: tessera_ucx::Error| BenchError::System(format!("a raw UCX link: {e}"));
    let (address_tx, address_rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let tls = transports.to_owned();
    let receiver = std::thread::spawn(move || -> Result<u64, String> {
        let context = Context::new(Some(&tls)).map_err(|e| e.to_string())?;
        let worker = Worker::new(&context).map_err(|e| e.to_string())?;
        for am in [AM_DATA, AM_END] {
            worker.set_am_handler(am, |_, length| Vec::with_capacity(length)).map_err(|e| e.to_string())?;
        }
        address_tx.send(worker.address().as_bytes().to_vec()).map_err(|e| e.to_string())?;
        let mut bytes = 0u64;
        let deadline = Instant::now() + run + drain;
        while Instant::now() < deadline {
            while worker.progress() > 0 {}
            while let Some(event) = worker.next_event() {
                if let Event::Received(m) = event {
                    if m.am_id == AM_END {
                        return Ok(bytes);
                    }
                    bytes += m.data.len() as u64;
                }
            }
        }
        Err("the sender's end never came".into())
    });
    let address =
        address_rx.recv().map_err(|_| BenchError::System("a raw UCX link's receiver did not start".into()))?;
    let context = Context::new(Some(transports)).map_err(failed)?;
    let worker = Worker::new(&context).map_err(failed)?;
    // SAFETY: the address is the receiver thread's worker's, as `ucp_worker_get_address` gave it.
    #[allow(unsafe_code)]
    let address = unsafe { WorkerAddress::from_bytes_unchecked(address) };
    let endpoint = worker.connect(&address, ErrorHandling::None).map_err(failed)?;
    let payload = Rc::new(MemRegion::new(&context, vec![0x5au8; message_bytes]).map_err(failed)?);
    let start = Instant::now();
    let mut in_flight = std::collections::VecDeque::new();
    while start.elapsed() < run {
        while worker.progress() > 0 {}
        while worker.next_event().is_some() {}
        while in_flight.front().is_some_and(|t: &tessera_ucx::SendToken<_>| t.is_finished()) {
            in_flight.pop_front();
        }
        while in_flight.len() < UCX_WINDOW {
            in_flight.push_back(endpoint.send(AM_DATA, &[], vec![payload.slice(0..message_bytes)]));
        }
    }
    let end = endpoint.send(AM_END, &[], Vec::<Vec<u8>>::new());
    let deadline = Instant::now() + drain;
    while !(end.is_finished() && in_flight.iter().all(|t| t.is_finished())) && Instant::now() < deadline {
        worker.progress();
    }
    let bytes = loop {
        if receiver.is_finished() || Instant::now() >= deadline {
            break receiver.join().map_err(|_| BenchError::System("a raw UCX link's receiver panicked".into()))?;
        }
        worker.progress();
    };
    let took = start.elapsed();
    drop(in_flight);
    drop(end);
    let bytes = bytes.map_err(|e| BenchError::System(format!("a raw UCX link on {transports}: {e}")))?;
    Ok((bytes, took))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raw_tcp_link_moves_bytes() {
        let m = raw_link(&LinkKind::Tcp, 4096, 0.05).unwrap();
        assert!(m.bytes >= 4096 && m.bytes.is_multiple_of(4096), "{m:?}");
        assert!(m.gb_per_s() > 0.0);
    }

    #[cfg(feature = "ucx")]
    #[test]
    fn a_raw_ucx_link_moves_bytes_on_tcp_and_shared_memory() {
        for tls in ["tcp", "sm,self"] {
            let m = raw_link(&LinkKind::Ucx(tls), 64 << 10, 0.1).unwrap();
            assert!(m.bytes >= 64 << 10 && m.bytes.is_multiple_of(64 << 10), "{tls}: {m:?}");
        }
    }

    #[cfg(not(feature = "ucx"))]
    #[test]
    fn a_raw_ucx_link_without_the_feature_says_so() {
        let e = raw_link(&LinkKind::Ucx("tcp"), 4096, 0.01).unwrap_err();
        assert!(e.to_string().contains("--features ucx"), "{e}");
    }
}
