//! A small safe wrapper over the UCX calls that a UCX transport of Tessera needs (issue #22):
//! UCP active messages sent as a header and an I/O vector of pieces, received eagerly (copied
//! out) or by rendezvous (straight into a buffer the receiver gives); worker wake-up through an
//! event file descriptor that a poller such as mio registers; endpoints made from a peer's worker
//! address, with UCX's peer-failure handling reported as an event; memory mapped for UCX.
//!
//! Written against UCX 1.13 (Debian's `libucx-dev`), by hand: the declarations in `sys` are only
//! what is used, and a test compiles a C program against `<ucp/api/ucp.h>` to check every struct
//! layout and constant they declare.
//!
//! # The feature `ucx`
//!
//! Everything is behind the cargo feature `ucx`, which links `libucp` and `libucs`. Without it
//! the crate is empty but for [`ENABLED`], so that the workspace builds with nothing but cargo.
//!
//! # Why this crate may use `unsafe`
//!
//! The workspace denies `unsafe_code`; this crate alone allows it, because calling C is unsafe:
//! every call into UCX, the callbacks UCX makes into Rust, and the memory lent to UCX while it
//! works. Each `unsafe` block says why it is sound (`// SAFETY:`), and the API above them is safe:
//! memory UCX reads or writes is owned by a `SendToken`, a worker's receive or a `MemRegion`
//! until UCX is done with it; callbacks only record events, never panic across the FFI boundary
//! and never run the caller's code; every wait is bounded. The one thing it cannot check is a
//! peer's address received as bytes (UCX parses it trusting its contents, without its length):
//! `WorkerAddress::from_bytes_unchecked` is `unsafe`.
//!
//! (The names in this page are written without links: without the feature they do not exist.)
//!
//! # Threads
//!
//! One thread per worker: UCX is started with `UCS_THREAD_MODE_SINGLE`, and every type here but
//! `WorkerAddress` is `!Send` (each holds an `Rc` of its context or worker). A thread that talks
//! UCX makes its own `Context` and `Worker`; workers of different threads (or processes) are
//! connected by address like any peers.
//!
//! # Using it
//!
//! ```ignore
//! let context = Context::new(Some("tcp"))?;
//! let worker = Worker::new(&context)?;
//! worker.set_am_handler(7, |_header, length| Vec::with_capacity(length))?;
//! let endpoint = worker.connect(&peer_address, ErrorHandling::Peer)?;
//! let token = endpoint.send(7, b"header", vec![piece_a, piece_b]);
//! loop {
//!     while worker.progress() > 0 {}
//!     while let Some(event) = worker.next_event() { /* Received, Sent, EndpointFailed */ }
//!     if worker.arm()? { /* wait on worker.event_fd() */ }
//! }
//! ```
//!
//! Received messages are given in the order they arrived at the worker (so in the order sent,
//! per endpoint): a rendezvous message's data is received before its event is given, and the
//! messages that arrived after it wait for it.
//!
//! # What UCX 1.13 does when a peer goes
//!
//! Over TCP, an endpoint made with `ErrorHandling::Peer` fails as soon as the peer's worker is
//! destroyed (its connections close): the next progress gives `Event::EndpointFailed` with
//! `Status::ENDPOINT_TIMEOUT`, its sends in flight fail and new ones fail at once. A peer that
//! only closes its own endpoint to us is not gone: its worker still receives.
//!
//! UCX 1.13's shared-memory transports (`self`, `sysv`, `posix`; `cma` only moves rendezvous
//! data) cannot detect a peer's failure at all. An endpoint with `ErrorHandling::Peer` cannot be
//! made over `sm,self` alone (`Error::Connect`, `UCS_ERR_UNREACHABLE`). One with
//! `ErrorHandling::None` to a worker that is gone reports nothing: its sends finish while the
//! gone worker's receive FIFO in shared memory has room (about 60 small messages), then stay in
//! flight; UCX refuses a forced close of such an endpoint (`UCS_ERR_INVALID_PARAM`) and a flush
//! never ends, so they end only with the worker. A Tessera transport over shared memory needs a
//! liveness check of its own, or tcp beside sm (`sm,self,tcp`: endpoints with
//! `ErrorHandling::Peer` are then made, and fail when the peer goes, over tcp).

#![allow(unsafe_code)]
#![warn(missing_docs)]

/// Whether this build has UCX (the feature `ucx`).
pub const ENABLED: bool = cfg!(feature = "ucx");

#[cfg(feature = "ucx")]
mod context;
#[cfg(feature = "ucx")]
mod endpoint;
#[cfg(feature = "ucx")]
mod error;
#[cfg(feature = "ucx")]
mod mem;
#[cfg(feature = "ucx")]
mod send;
#[cfg(feature = "ucx")]
mod sys;
#[cfg(feature = "ucx")]
mod worker;

#[cfg(feature = "ucx")]
pub use context::Context;
#[cfg(feature = "ucx")]
pub use endpoint::{CloseMode, Endpoint, EndpointId};
#[cfg(feature = "ucx")]
pub use error::{Error, ErrorHandling, Status};
#[cfg(feature = "ucx")]
pub use mem::{MappedSlice, MemRegion};
#[cfg(feature = "ucx")]
pub use send::{SendId, SendToken};
#[cfg(feature = "ucx")]
pub use worker::{AmId, Event, Message, Worker, WorkerAddress};
