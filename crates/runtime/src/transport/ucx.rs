//! The UCX side of the transport seam: a worker per unit's loop, an endpoint per connection.

use super::{Arrival, MAX_SENDS_IN_FLIGHT, TransportError};
use crate::error::NodeError;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tessera_ucx::{CloseMode, Context, EndpointId, ErrorHandling, Event, SendId, SendToken, Worker, WorkerAddress};

/// The active-message id of a protocol frame.
const AM_FRAME: u16 = 1;

/// A unit loop's UCX: its context and worker, and which connection each send and endpoint is.
pub(crate) struct Fabric {
    worker: Worker,
    _context: Context,
    /// The connection of each send in flight.
    sends: HashMap<SendId, usize>,
    /// The connection of each endpoint.
    endpoints: HashMap<EndpointId, usize>,
    /// UCX's peer-failure handling where the transports have it.
    error_handling: ErrorHandling,
}

/// Shared-memory transports of UCX, which cannot see a peer go (UCX 1.13).
const SHARED_MEMORY: [&str; 9] = ["sm", "shm", "self", "posix", "sysv", "cma", "mm", "knem", "xpmem"];

/// UCX's peer-failure handling for `transports` (else `UCX_TLS`): none over shared memory alone,
/// which cannot have it (the link's TCP connection tells instead), else UCX's own.
fn error_handling_for(transports: Option<&str>) -> ErrorHandling {
    let list = transports.map(str::to_owned).or_else(|| std::env::var("UCX_TLS").ok());
    match list {
        Some(list) if list.split(',').all(|t| SHARED_MEMORY.contains(&t.trim())) => ErrorHandling::None,
        _ => ErrorHandling::Peer,
    }
}

impl Fabric {
    /// UCX on `transports` (as `UCX_TLS` names them; `None`: `UCX_TLS`, else UCX's choice), with
    /// a handler for protocol frames. Fails with UCX's reason and the transports it found.
    pub fn new(transports: Option<&str>) -> Result<Fabric, NodeError> {
        let context = Context::new(transports).map_err(|e| NodeError::Transport(format!("starting UCX: {e}")))?;
        let worker = Worker::new(&context).map_err(|e| NodeError::Transport(format!("a UCX worker: {e}")))?;
        // Received straight into memory of the frame's length, which becomes the frame's own.
        worker
            .set_am_handler(AM_FRAME, |_, length| Vec::with_capacity(length))
            .map_err(|e| NodeError::Transport(format!("a UCX message handler: {e}")))?;
        let error_handling = error_handling_for(transports);
        Ok(Fabric { worker, _context: context, sends: HashMap::new(), endpoints: HashMap::new(), error_handling })
    }

    /// The worker's address, for the peers' hellos.
    pub fn address(&self) -> &[u8] {
        self.worker.address().as_bytes()
    }

    /// Has `registry` wake the loop at `token` when the worker has work.
    pub fn register(&self, registry: &Registry, token: Token) -> std::io::Result<()> {
        registry.register(&mut SourceFd(&self.worker.event_fd()), token, Interest::READABLE)
    }

    /// A channel to the worker at `address`, for connection `token`, with UCX's peer-failure
    /// handling where the transports have it ([`error_handling_for`]).
    pub fn connect(&mut self, address: Vec<u8>, token: usize) -> Result<Channel, TransportError> {
        // SAFETY: the address is the one the peer's hello carried, on a TCP connection whose link
        // the peer opened with the run's key (`crate::link`): a unit of this run, which sends its
        // worker's address as `ucp_worker_get_address` gave it.
        #[allow(unsafe_code)]
        let address = unsafe { WorkerAddress::from_bytes_unchecked(address) };
        let endpoint = self.worker.connect(&address, self.error_handling)?;
        self.endpoints.insert(endpoint.id(), token);
        Ok(Channel { endpoint, in_flight: VecDeque::new() })
    }

    /// Progresses the worker until it has nothing more to do, and says what happened.
    pub fn pump(&mut self) -> Vec<Arrival> {
        while self.worker.progress() > 0 {}
        let mut arrivals = Vec::new();
        while let Some(event) = self.worker.next_event() {
            match event {
                Event::Received(m) => match <[u8; 16]>::try_from(m.header.as_slice()) {
                    Ok(h) => arrivals.push(Arrival::Frame {
                        token: u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) as usize,
                        nonce: u64::from_le_bytes(h[8..].try_into().expect("8 bytes")),
                        bytes: m.data,
                    }),
                    Err(_) => arrivals.push(Arrival::Stray {
                        what: format!("a message of {} bytes with a header of {} bytes", m.data.len(), m.header.len()),
                    }),
                },
                Event::ReceiveFailed { header, status, .. } => {
                    if let Ok(h) = <[u8; 16]>::try_from(header.as_slice()) {
                        let token = u64::from_le_bytes(h[..8].try_into().expect("8 bytes")) as usize;
                        arrivals.push(Arrival::Failed { token, why: format!("receiving a frame over UCX: {status}") });
                    }
                }
                Event::Sent { id, result } => {
                    if let Some(token) = self.sends.remove(&id) {
                        arrivals.push(Arrival::Sent { token, result });
                    }
                }
                Event::EndpointFailed { endpoint, status } => {
                    if let Some(token) = self.endpoints.remove(&endpoint) {
                        arrivals.push(Arrival::Failed { token, why: format!("UCX lost the peer: {status}") });
                    }
                }
                Event::Fault(what) => arrivals.push(Arrival::Stray { what: format!("a UCX callback failed: {what}") }),
            }
        }
        arrivals
    }

    /// Whether the loop may sleep on the worker's event file descriptor: false while UCX has
    /// work left (pump again first). An arm that fails says why; the loop then sleeps its
    /// shortest (and pumps at every pass).
    pub fn may_sleep(&self) -> Result<bool, TransportError> {
        self.worker.arm()
    }
}

/// A connection's UCX endpoint and its sends in flight.
pub(crate) struct Channel {
    endpoint: tessera_ucx::Endpoint,
    /// Each send in flight with the bytes it carries.
    in_flight: VecDeque<(SendToken<Vec<u8>>, usize)>,
}

impl Channel {
    /// Whether another frame may be handed to UCX now.
    pub fn has_room(&self) -> bool {
        self.in_flight.len() < MAX_SENDS_IN_FLIGHT
    }

    /// Sends `frame`, whole, as one message with `header`, for connection `token`.
    pub fn send(&mut self, fabric: &mut Fabric, token: usize, header: &[u8; 16], frame: Vec<u8>) {
        let bytes = frame.len();
        let send = self.endpoint.send(AM_FRAME, header, vec![frame]);
        fabric.sends.insert(send.id(), token);
        self.in_flight.push_back((send, bytes));
    }

    /// The sends that finished, with the bytes they carried, in total.
    pub fn finished(&mut self) -> usize {
        let mut bytes = 0;
        while self.in_flight.front().is_some_and(|(s, _)| s.is_finished()) {
            bytes += self.in_flight.pop_front().expect("looked at").1;
        }
        bytes
    }

    /// Closes the endpoint: `graceful`, its sends in flight reach the peer first, within `timeout`
    /// (said if they did not); otherwise at once.
    pub fn close(self, fabric: &mut Fabric, graceful: bool, timeout: Duration) -> Result<(), TransportError> {
        fabric.endpoints.remove(&self.endpoint.id());
        for (send, _) in &self.in_flight {
            fabric.sends.remove(&send.id());
        }
        if graceful {
            self.endpoint.close(CloseMode::Flush, timeout)
        } else {
            // A failed endpoint is closed at once; one to a peer that went over shared memory
            // closes with the worker.
            drop(self.endpoint);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_alone_has_no_peer_failure_handling_and_the_rest_have() {
        assert_eq!(error_handling_for(Some("sm,self")), ErrorHandling::None);
        assert_eq!(error_handling_for(Some("posix, cma ,self")), ErrorHandling::None);
        assert_eq!(error_handling_for(Some("sm,self,tcp")), ErrorHandling::Peer);
        assert_eq!(error_handling_for(Some("rc_x,ud_x")), ErrorHandling::Peer);
    }
}
