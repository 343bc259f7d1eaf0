//! The worker: UCX's progress engine, its event file descriptor, its active-message handlers and
//! the events its callbacks leave for the caller.
//!
//! UCX calls back into this crate (a message arrived, a send or a receive completed, an endpoint
//! failed) from inside `ucp_worker_progress` and, for some completions, from inside other UCP
//! calls on the worker. The callbacks only record: they copy what they must, queue an
//! [`Event`] and return, inside `catch_unwind`. Anything that runs the caller's code (the buffer
//! closure of a rendezvous message, the drop of a send's pieces) happens after the UCP call has
//! returned. No `RefCell` of the shared state is ever borrowed across a UCP call, so a callback
//! never finds one borrowed.

use crate::context::{Context, ContextInner};
use crate::endpoint::{Endpoint, EndpointId};
use crate::error::{Error, ErrorHandling, Status};
use crate::send::SendId;
use crate::sys;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::c_void;
use std::os::fd::RawFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;
use std::time::Duration;

/// An active-message id: the receiver's handler for it is chosen by it.
pub type AmId = u16;

/// A message received by an active-message handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The active-message id it was sent with.
    pub am_id: AmId,
    /// The header the sender gave, copied out.
    pub header: Vec<u8>,
    /// The data. An eager message's data is copied out of UCX's buffer into this `Vec`; a
    /// rendezvous message's data was received straight into the `Vec` the handler's buffer
    /// closure gave (of the message's length).
    pub data: Vec<u8>,
    /// Whether it came by rendezvous (`UCP_AM_RECV_ATTR_FLAG_RNDV`).
    pub rendezvous: bool,
}

/// What a worker's progress brought: taken with [`Worker::next_event`].
#[derive(Debug)]
pub enum Event {
    /// A message arrived whole. Messages are given in the order they arrived at the worker,
    /// which is the order they were sent per endpoint: a rendezvous message's event waits for
    /// its data, and the events of the messages that arrived after it (from any endpoint) wait
    /// for it.
    Received(Message),
    /// A rendezvous message was announced but receiving its data failed (in its place in the
    /// order of messages).
    ReceiveFailed {
        /// Its active-message id.
        am_id: AmId,
        /// Its header.
        header: Vec<u8>,
        /// Why.
        status: Status,
    },
    /// A send finished (exactly one such event for every [`Endpoint::send`]): its pieces may be
    /// taken back from its [`SendToken`](crate::SendToken).
    Sent {
        /// The send.
        id: SendId,
        /// `Err` when it failed or was canceled (e.g. by a forced close of its endpoint).
        result: Result<(), Status>,
    },
    /// An endpoint made with [`ErrorHandling::Peer`] failed: its peer is gone (or unreachable).
    /// Its sends in flight finish with an error; it should be dropped.
    EndpointFailed {
        /// The endpoint.
        endpoint: EndpointId,
        /// UCX's reason, e.g. [`Status::ENDPOINT_TIMEOUT`] or [`Status::CONNECTION_RESET`].
        status: Status,
    },
    /// A callback from UCX panicked (a bug in this crate): what it was doing is lost.
    Fault(String),
}

/// The closure that gives a rendezvous message's receive buffer: called with the message's
/// header and length, it returns the `Vec` whose memory the data is received into (emptied, and
/// given room for the length; its contents are not kept).
type BufferFn = dyn FnMut(&[u8], usize) -> Vec<u8>;

/// What a callback needs to find its operation: the worker's shared state and the operation's id.
pub(crate) struct OpCtx {
    pub(crate) shared: *const Shared,
    pub(crate) id: u64,
}

/// A heap value whose address is given to UCX (as a callback's `user_data` or a handler's
/// `arg`): held by a raw pointer from `Box::into_raw`, so that moving its owner (into a map, a
/// slot) never moves or re-borrows the value UCX points to; freed when dropped.
pub(crate) struct RawBox<T>(*mut T);

impl<T> RawBox<T> {
    pub(crate) fn new(value: T) -> RawBox<T> {
        RawBox(Box::into_raw(Box::new(value)))
    }

    /// The address to give UCX.
    pub(crate) fn as_c_ptr(&self) -> *mut c_void {
        self.0.cast()
    }
}

impl<T> Drop for RawBox<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by Box::into_raw in `new` and freed only here, once. Every owner drops
        // it only when UCX can no longer use the address: a slot is removed after its
        // operation's callback ran (or when the worker is destroyed), a handler's argument when
        // the worker is destroyed or after UCX was given its replacement.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// A send in flight or finished and not yet taken back.
pub(crate) struct SendSlot {
    pub(crate) _ctx: RawBox<OpCtx>,
    pub(crate) result: Option<Result<(), Status>>,
    /// The send's memory when its token was dropped before it finished.
    pub(crate) orphan: Option<Box<dyn Any>>,
}

/// A rendezvous receive in flight: the buffer UCX writes into.
struct RecvSlot {
    _ctx: RawBox<OpCtx>,
    arrival: u64,
    am_id: AmId,
    header: Vec<u8>,
    buffer: Vec<u8>,
}

/// A rendezvous message announced in a callback, received after the progress call returns.
struct Arrived {
    arrival: u64,
    am_id: AmId,
    header: Vec<u8>,
    desc: *mut c_void,
    length: usize,
}

/// An endpoint as the callbacks know it.
pub(crate) struct EpSlot {
    pub(crate) id: Option<EndpointId>,
    pub(crate) failed: Option<Status>,
}

/// A close request still in flight, and the endpoint it closes.
pub(crate) struct Closing {
    pub(crate) request: *mut c_void,
    pub(crate) ep: usize,
    pub(crate) id: EndpointId,
}

/// A handler's argument given to UCX, freed with the worker.
struct HandlerArg {
    shared: *const Shared,
    am_id: AmId,
}

struct Handler {
    buffer: Rc<RefCell<BufferFn>>,
    _arg: RawBox<HandlerArg>,
}

/// The state the callbacks and the wrapper share. Boxed by the worker, so that its address
/// (given to UCX) stays put; dropped only after `ucp_worker_destroy`.
#[derive(Default)]
pub(crate) struct Shared {
    events: RefCell<VecDeque<Event>>,
    arrived: RefCell<Vec<Arrived>>,
    /// The arrival number of the next message, and of the next to give.
    arrivals: Cell<u64>,
    delivered: Cell<u64>,
    /// Messages finished out of their arrival order, held until those before them finished.
    held: RefCell<BTreeMap<u64, Event>>,
    pub(crate) sends: RefCell<HashMap<u64, SendSlot>>,
    recvs: RefCell<HashMap<u64, RecvSlot>>,
    /// Keyed by the `ucp_ep_h`.
    pub(crate) endpoints: RefCell<HashMap<usize, EpSlot>>,
    pub(crate) closing: RefCell<Vec<Closing>>,
    handlers: RefCell<HashMap<AmId, Handler>>,
    /// The memory of finished sends whose tokens were dropped: freed after the progress call.
    graveyard: RefCell<Vec<Box<dyn Any>>>,
    next_id: Cell<u64>,
    faults: Cell<u64>,
}

impl Shared {
    pub(crate) fn next_id(&self) -> u64 {
        let id = self.next_id.get() + 1;
        self.next_id.set(id);
        id
    }

    pub(crate) fn push_event(&self, event: Event) {
        self.events.borrow_mut().push_back(event);
    }

    /// Forgets a closed endpoint, unless its `ucp_ep_h` is already another endpoint's (UCX may
    /// reuse the memory of a closed endpoint before its close request is reaped).
    pub(crate) fn forget_endpoint(&self, ep: usize, id: EndpointId) {
        let mut endpoints = self.endpoints.borrow_mut();
        if endpoints.get(&ep).is_some_and(|slot| slot.id == Some(id)) {
            endpoints.remove(&ep);
        }
    }

    /// The arrival number of a message that just arrived.
    fn arrival(&self) -> u64 {
        let arrival = self.arrivals.get();
        self.arrivals.set(arrival + 1);
        arrival
    }

    /// Gives the event of message `arrival` once every message that arrived before it is given.
    fn deliver(&self, arrival: u64, event: Event) {
        if arrival < self.delivered.get() {
            // Only after a fault gave up the order (below).
            self.push_event(event);
            return;
        }
        let mut held = self.held.borrow_mut();
        held.insert(arrival, event);
        let mut next = self.delivered.get();
        while let Some(event) = held.remove(&next) {
            self.push_event(event);
            next += 1;
        }
        self.delivered.set(next);
    }

    /// Records that a send finished: its slot's result, its event, and its orphaned memory (if
    /// its token is gone) to the graveyard.
    pub(crate) fn send_finished(&self, id: u64, result: Result<(), Status>) {
        let orphan = {
            let mut sends = self.sends.borrow_mut();
            match sends.get_mut(&id) {
                Some(slot) if slot.orphan.is_some() => sends.remove(&id).and_then(|slot| slot.orphan),
                Some(slot) => {
                    slot.result = Some(result);
                    None
                }
                None => None,
            }
        };
        if let Some(orphan) = orphan {
            self.graveyard.borrow_mut().push(orphan);
        }
        self.push_event(Event::Sent { id: SendId(id), result });
    }
}

/// A UCP worker: UCX's progress engine for the endpoints made from it.
///
/// Single-threaded (`UCS_THREAD_MODE_SINGLE`) and not `Send`: the worker, its endpoints and sends
/// stay on the thread that made it, which alone calls [`progress`](Worker::progress). Nothing
/// happens without progress: messages arrive, sends complete and failures are reported only
/// while it is called. A poller waits for work on [`event_fd`](Worker::event_fd) (e.g. mio's
/// `SourceFd`), as UCX asks: progress until it returns 0, then [`arm`](Worker::arm), and wait only
/// when `arm` says `true`.
///
/// Cloning shares the worker; it is destroyed (`ucp_worker_destroy`) when the last clone, its
/// last [`Endpoint`] and its last [`SendToken`](crate::SendToken) are gone.
#[derive(Clone)]
pub struct Worker {
    pub(crate) inner: Rc<WorkerInner>,
}

pub(crate) struct WorkerInner {
    pub(crate) handle: sys::ucp_worker_h,
    pub(crate) shared: Box<Shared>,
    address: WorkerAddress,
    event_fd: RawFd,
    _context: Rc<ContextInner>,
}

impl WorkerInner {
    pub(crate) fn shared_ptr(&self) -> *const Shared {
        &*self.shared
    }
}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        // Rendezvous messages never received (only when a buffer closure panicked): given back.
        for arrived in std::mem::take(&mut *self.shared.arrived.borrow_mut()) {
            // SAFETY: a rendezvous descriptor from an AM callback that returned UCS_INPROGRESS and
            // on which ucp_am_data_release/recv_data_nbx was never called; the worker is live.
            unsafe { sys::ucp_am_data_release(self.handle, arrived.desc) };
        }
        for closing in std::mem::take(&mut *self.shared.closing.borrow_mut()) {
            // SAFETY: a close request returned by ucp_ep_close_nbx and not freed yet; freeing it
            // in flight is allowed (UCP finishes it internally, without a callback).
            unsafe { sys::ucp_request_free(closing.request) };
        }
        // SAFETY: the handle came from ucp_worker_create and is destroyed once. Every endpoint and
        // token holds this Rc, so none is left to use it. After this, UCX calls no callback of
        // this worker, so `shared` (with the memory of sends and receives still in flight) is
        // dropped after it, as the struct's fields are.
        unsafe { sys::ucp_worker_destroy(self.handle) };
    }
}

/// A worker's address (`ucp_worker_get_address`): what a peer connects to.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WorkerAddress(Vec<u8>);

impl WorkerAddress {
    /// Its bytes, to hand to a peer.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The address of these bytes, unchecked.
    ///
    /// # Safety
    ///
    /// `bytes` must be exactly what [`as_bytes`](WorkerAddress::as_bytes) gave for a live worker
    /// of a compatible UCX, unchanged. UCX parses an address without its length (`ucp_ep_create`
    /// takes only a pointer) and trusts every length and index inside it: bytes that are not such
    /// an address make it read beyond them.
    pub unsafe fn from_bytes_unchecked(bytes: Vec<u8>) -> WorkerAddress {
        WorkerAddress(bytes)
    }
}

impl std::fmt::Debug for WorkerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerAddress({} bytes)", self.0.len())
    }
}

impl Worker {
    /// A worker of `context`, single-threaded, woken by receives and send completions
    /// (`UCP_WAKEUP_RX | UCP_WAKEUP_TX`).
    pub fn new(context: &Context) -> Result<Worker, Error> {
        let params = sys::ucp_worker_params_t {
            field_mask: sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE | sys::UCP_WORKER_PARAM_FIELD_EVENTS,
            thread_mode: sys::UCS_THREAD_MODE_SINGLE,
            cpu_mask: sys::ucs_cpu_set_t { ucs_bits: [0; sys::UCS_CPU_SET_WORDS] },
            events: sys::UCP_WAKEUP_RX | sys::UCP_WAKEUP_TX,
            user_data: ptr::null_mut(),
            event_fd: -1,
            flags: 0,
            name: ptr::null(),
            am_alignment: 0,
            client_id: 0,
        };
        let mut handle = ptr::null_mut();
        // SAFETY: the context is live (held below for the worker's life); params and the out
        // pointer are valid for the call; only the fields in field_mask are read.
        Status::check(
            unsafe { sys::ucp_worker_create(context.inner.handle, &params, &mut handle) },
            "ucp_worker_create",
        )?;
        // From here on the handle is destroyed by the guard if anything fails.
        struct Guard(sys::ucp_worker_h);
        impl Drop for Guard {
            fn drop(&mut self) {
                // SAFETY: a worker just created and not handed out.
                unsafe { sys::ucp_worker_destroy(self.0) };
            }
        }
        let guard = Guard(handle);
        let mut event_fd = -1;
        // SAFETY: the worker is live; the out pointer is valid. The fd stays the worker's.
        Status::check(unsafe { sys::ucp_worker_get_efd(handle, &mut event_fd) }, "ucp_worker_get_efd")?;
        let mut address = ptr::null_mut();
        let mut length = 0usize;
        // SAFETY: the worker is live; both out pointers are valid.
        Status::check(
            unsafe { sys::ucp_worker_get_address(handle, &mut address, &mut length) },
            "ucp_worker_get_address",
        )?;
        // SAFETY: UCX returned `length` readable bytes at `address`; they are copied, then given
        // back once.
        let bytes = unsafe { std::slice::from_raw_parts(address.cast::<u8>(), length) }.to_vec();
        // SAFETY: as above: the address this worker gave, released once.
        unsafe { sys::ucp_worker_release_address(handle, address) };
        std::mem::forget(guard);
        Ok(Worker {
            inner: Rc::new(WorkerInner {
                handle,
                shared: Box::default(),
                address: WorkerAddress(bytes),
                event_fd,
                _context: Rc::clone(&context.inner),
            }),
        })
    }

    /// This worker's address, for peers to connect to.
    pub fn address(&self) -> &WorkerAddress {
        &self.inner.address
    }

    /// The worker's event file descriptor (`ucp_worker_get_efd`), readable when there may be
    /// work after [`arm`](Worker::arm) said `true`. It stays the worker's: register it with a
    /// poller, never close it.
    pub fn event_fd(&self) -> RawFd {
        self.inner.event_fd
    }

    /// Arms the event file descriptor (`ucp_worker_arm`): `Ok(true)` when it is armed and the
    /// caller may wait on it, `Ok(false)` when UCX has events still to progress (`UCS_ERR_BUSY`):
    /// progress again before waiting (UCX 1.13 often answers so once or twice right after a
    /// progress that returned 0). Queued [`Event`]s are not UCX's: take them first.
    pub fn arm(&self) -> Result<bool, Error> {
        // SAFETY: the worker is live.
        match unsafe { sys::ucp_worker_arm(self.inner.handle) } {
            sys::UCS_OK => Ok(true),
            sys::UCS_ERR_BUSY => Ok(false),
            status => Err(Error::Call { call: "ucp_worker_arm", status: Status::from_code(status) }),
        }
    }

    /// One round of progress (`ucp_worker_progress`), then what must follow outside UCX's
    /// callbacks: rendezvous messages announced are received into the buffers their handlers
    /// give, finished close requests are freed, the memory of finished sends whose tokens were
    /// dropped is dropped. Returns how much happened (0: nothing; then arm and wait). What
    /// happened is queued as [`Event`]s.
    pub fn progress(&self) -> usize {
        // SAFETY: the worker is live; callbacks run inside this call only touch `shared`.
        let progressed = unsafe { sys::ucp_worker_progress(self.inner.handle) } as usize;
        progressed + self.after_progress()
    }

    /// The next event, if any.
    pub fn next_event(&self) -> Option<Event> {
        self.inner.shared.events.borrow_mut().pop_front()
    }

    /// Every queued event, in order.
    pub fn take_events(&self) -> Vec<Event> {
        self.inner.shared.events.borrow_mut().drain(..).collect()
    }

    /// Progresses, and when nothing is to be done, sleeps on the event file descriptor for at
    /// most `timeout`: returns at once (`Ok(true)`) when events are queued or progress happened,
    /// else after the descriptor became readable (`Ok(true)`) or the time ran out (`Ok(false)`).
    /// For callers without a poller of their own.
    pub fn wait(&self, timeout: Duration) -> Result<bool, Error> {
        if !self.inner.shared.events.borrow().is_empty() || self.progress() > 0 {
            return Ok(true);
        }
        if !self.arm()? {
            return Ok(true);
        }
        let mut fd = libc::pollfd { fd: self.inner.event_fd, events: libc::POLLIN, revents: 0 };
        let millis = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd for the call.
        let ready = unsafe { libc::poll(&mut fd, 1, millis) };
        if ready < 0 {
            let errno = std::io::Error::last_os_error();
            if errno.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::System { call: "poll", error: errno.to_string() });
            }
        }
        Ok(ready > 0)
    }

    /// Sets the handler of active messages `am_id` (`ucp_worker_set_am_recv_handler`, whole
    /// messages). Its messages come as [`Event::Received`]: an eager message copied out of UCX's
    /// buffer, a rendezvous message received (`ucp_am_recv_data_nbx`) straight into the `Vec`
    /// that `buffer` gives when called, inside [`progress`](Worker::progress), with the
    /// message's header and length: its memory is reused (emptied, with room made for the
    /// length; nothing is written into it before UCX does), so `Vec::with_capacity(length)` is
    /// the cheapest answer. Setting a handler again replaces the closure.
    pub fn set_am_handler<F>(&self, am_id: AmId, buffer: F) -> Result<(), Error>
    where
        F: FnMut(&[u8], usize) -> Vec<u8> + 'static,
    {
        let arg = RawBox::new(HandlerArg { shared: self.inner.shared_ptr(), am_id });
        let params = sys::ucp_am_handler_param_t {
            field_mask: sys::UCP_AM_HANDLER_PARAM_FIELD_ID
                | sys::UCP_AM_HANDLER_PARAM_FIELD_FLAGS
                | sys::UCP_AM_HANDLER_PARAM_FIELD_CB
                | sys::UCP_AM_HANDLER_PARAM_FIELD_ARG,
            id: am_id.into(),
            flags: sys::UCP_AM_FLAG_WHOLE_MSG,
            cb: Some(am_arrived),
            arg: arg.as_c_ptr(),
        };
        // SAFETY: the worker is live; params are valid for the call. `arg` is kept in `handlers`
        // (below) until the worker is destroyed or the handler replaced, after which UCX no
        // longer passes the old one.
        Status::check(
            unsafe { sys::ucp_worker_set_am_recv_handler(self.inner.handle, &params) },
            "ucp_worker_set_am_recv_handler",
        )?;
        let buffer: Rc<RefCell<BufferFn>> = Rc::new(RefCell::new(buffer));
        self.inner.shared.handlers.borrow_mut().insert(am_id, Handler { buffer, _arg: arg });
        Ok(())
    }

    /// An endpoint to the worker at `address` (`ucp_ep_create`), with the error handling `mode`.
    /// Connecting does not wait for the peer: messages sent before it answers wait in UCX.
    pub fn connect(&self, address: &WorkerAddress, mode: ErrorHandling) -> Result<Endpoint, Error> {
        Endpoint::connect(self, address, mode)
    }

    /// What must run after a UCP call that may have called back: receive the announced
    /// rendezvous messages, free finished close requests, drop orphaned memory, report faults.
    pub(crate) fn after_progress(&self) -> usize {
        let shared = &self.inner.shared;
        let mut done = 0;
        loop {
            let arrived = std::mem::take(&mut *shared.arrived.borrow_mut());
            if arrived.is_empty() {
                break;
            }
            done += arrived.len();
            let mut arrived = arrived.into_iter();
            while let Some(message) = arrived.next() {
                match catch_unwind(AssertUnwindSafe(|| self.buffer_for(&message))) {
                    Ok(buffer) => self.receive_rendezvous(message, buffer),
                    Err(panic) => {
                        // The buffer closure panicked: this message and the rest go back to
                        // the queue (received by the next progress, or released with the
                        // worker), and the panic goes on.
                        let mut queue = shared.arrived.borrow_mut();
                        queue.push(message);
                        queue.extend(arrived);
                        drop(queue);
                        std::panic::resume_unwind(panic);
                    }
                }
            }
        }
        done += self.reap_closing();
        let graveyard = std::mem::take(&mut *shared.graveyard.borrow_mut());
        done += graveyard.len();
        drop(graveyard);
        let faults = shared.faults.replace(0);
        if faults > 0 {
            shared.push_event(Event::Fault(format!(
                "{faults} UCX callback(s) panicked; what they did is lost, and the messages held for \
                 their order are given now"
            )));
            // A message lost would hold every later one forever: the order is given up.
            let held = std::mem::take(&mut *shared.held.borrow_mut());
            shared.events.borrow_mut().extend(held.into_values());
            shared.delivered.set(shared.arrivals.get());
        }
        done
    }

    /// Frees the close requests that have finished, and forgets their endpoints.
    pub(crate) fn reap_closing(&self) -> usize {
        let shared = &self.inner.shared;
        let closing = std::mem::take(&mut *shared.closing.borrow_mut());
        let mut finished = 0;
        let mut still = Vec::new();
        for close in closing {
            // SAFETY: a close request from ucp_ep_close_nbx, not freed yet (it is freed only here
            // or when the worker is dropped).
            if unsafe { sys::ucp_request_check_status(close.request) } == sys::UCS_INPROGRESS {
                still.push(close);
            } else {
                // SAFETY: as above; freed once.
                unsafe { sys::ucp_request_free(close.request) };
                shared.forget_endpoint(close.ep, close.id);
                finished += 1;
            }
        }
        shared.closing.borrow_mut().extend(still);
        finished
    }

    /// The buffer the handler of an announced rendezvous message gives for it: empty, with room
    /// for its length. Nothing is written into it before UCX does (clearing it would be a pass
    /// over every byte); its length is set only once UCX has filled it.
    fn buffer_for(&self, arrived: &Arrived) -> Vec<u8> {
        let closure = self.inner.shared.handlers.borrow().get(&arrived.am_id).map(|handler| Rc::clone(&handler.buffer));
        let mut buffer = match closure.as_ref().map(|closure| closure.try_borrow_mut()) {
            Some(Ok(mut closure)) => (*closure)(&arrived.header, arrived.length),
            // No handler any more, or its closure is running (it called progress): a new Vec.
            _ => Vec::new(),
        };
        buffer.clear();
        buffer.reserve_exact(arrived.length);
        buffer
    }

    /// Receives an announced rendezvous message into `buffer` (empty, with room for its length).
    fn receive_rendezvous(&self, arrived: Arrived, mut buffer: Vec<u8>) {
        let shared = &self.inner.shared;
        let id = shared.next_id();
        let ctx = RawBox::new(OpCtx { shared: self.inner.shared_ptr(), id });
        let mut params = sys::ucp_request_param_t::empty();
        params.op_attr_mask =
            sys::UCP_OP_ATTR_FIELD_CALLBACK | sys::UCP_OP_ATTR_FIELD_USER_DATA | sys::UCP_OP_ATTR_FIELD_DATATYPE;
        params.cb = sys::ucp_request_param_cb { recv_am: Some(rendezvous_received) };
        params.user_data = ctx.as_c_ptr();
        params.datatype = sys::ucp_dt_make_contig(1);
        let data = buffer.as_mut_ptr();
        let (am_id, length, arrival) = (arrived.am_id, arrived.length, arrived.arrival);
        shared.recvs.borrow_mut().insert(id, RecvSlot { _ctx: ctx, arrival, am_id, header: arrived.header, buffer });
        // SAFETY: the worker is live; `desc` is a rendezvous descriptor from this worker's AM
        // callback, kept (UCS_INPROGRESS) and used once, here (UCP owns it after the call, even
        // on failure). `data` points to the spare capacity, at least `length` bytes, of the Vec
        // now in `recvs`, which is neither read, moved out of nor freed until the receive's
        // callback has run (or the worker is destroyed), and whose length stays 0 until UCX says
        // it wrote them all (`received_event`). user_data is the slot's context, freed with the
        // slot.
        let request =
            unsafe { sys::ucp_am_recv_data_nbx(self.inner.handle, arrived.desc, data.cast(), length, &params) };
        if sys::ucs_ptr_is_ptr(request) {
            // In flight, or already finished inside the call: either way its callback runs (or
            // ran) and frees the request. It is not touched here.
            return;
        }
        // Finished at once without a callback (NULL), or failed.
        let status = sys::ucs_ptr_raw_status(request);
        let slot = shared.recvs.borrow_mut().remove(&id);
        if let Some(slot) = slot {
            shared.deliver(slot.arrival, received_event(slot, status, length));
        }
    }
}

/// The event of a finished rendezvous receive.
fn received_event(slot: RecvSlot, status: sys::ucs_status_t, length: usize) -> Event {
    let RecvSlot { am_id, header, mut buffer, .. } = slot;
    if status == sys::UCS_OK {
        debug_assert!(buffer.is_empty() && buffer.capacity() >= length);
        // SAFETY: the receive of exactly `length` bytes into the Vec's spare capacity (reserved
        // for them in `buffer_for`) finished with UCS_OK: UCX wrote every one of them.
        unsafe { buffer.set_len(length) };
        Event::Received(Message { am_id, header, data: buffer, rendezvous: true })
    } else {
        Event::ReceiveFailed { am_id, header, status: Status::from_code(status) }
    }
}

/// Runs a callback's body, catching a panic (which must not cross into C): counted as a fault
/// that the next progress reports, and `fallback` is returned to UCX.
fn guarded<T>(shared: *const Shared, fallback: T, body: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|_| {
        // SAFETY: `shared` is the worker's boxed state, live while UCX can call back.
        let shared = unsafe { &*shared };
        shared.faults.set(shared.faults.get() + 1);
        fallback
    })
}

/// `ucp_am_recv_callback_t`: an active message arrived.
unsafe extern "C" fn am_arrived(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    // SAFETY: `arg` is the HandlerArg this handler was registered with, kept alive by the
    // worker's `handlers` until UCX can no longer pass it.
    let handler = unsafe { &*arg.cast::<HandlerArg>() };
    guarded(handler.shared, sys::UCS_OK, || {
        // SAFETY: the worker's boxed state outlives every callback (dropped after destroy).
        let shared = unsafe { &*handler.shared };
        let header = if header_length == 0 || header.is_null() {
            Vec::new()
        } else {
            // SAFETY: UCX passes `header_length` readable bytes at `header`, valid during the
            // callback; copied at once.
            unsafe { std::slice::from_raw_parts(header.cast::<u8>(), header_length) }.to_vec()
        };
        // SAFETY: UCX passes valid receive parameters for the callback's duration.
        let recv_attr = unsafe { (*param).recv_attr };
        if recv_attr & sys::UCP_AM_RECV_ATTR_FLAG_RNDV != 0 {
            // `data` is a descriptor: kept (UCS_INPROGRESS) and received after the progress call.
            let arrival = shared.arrival();
            shared.arrived.borrow_mut().push(Arrived { arrival, am_id: handler.am_id, header, desc: data, length });
            return sys::UCS_INPROGRESS;
        }
        let data = if length == 0 || data.is_null() {
            Vec::new()
        } else {
            // SAFETY: an eager message: `length` readable bytes at `data`, valid during the
            // callback (UCS_OK is returned: UCX releases them after); copied at once.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), length) }.to_vec()
        };
        let message = Message { am_id: handler.am_id, header, data, rendezvous: false };
        shared.deliver(shared.arrival(), Event::Received(message));
        sys::UCS_OK
    })
}

/// `ucp_am_recv_data_nbx_callback_t`: a rendezvous receive finished.
unsafe extern "C" fn rendezvous_received(
    request: *mut c_void,
    status: sys::ucs_status_t,
    length: usize,
    user_data: *mut c_void,
) {
    // SAFETY: user_data is the receive's OpCtx, alive until its slot is removed, which only this
    // callback (or the worker's drop, after which no callback comes) does. Its fields are copied
    // before the slot (and so the context) is dropped.
    let (shared, id) = unsafe {
        let ctx = &*user_data.cast::<OpCtx>();
        (ctx.shared, ctx.id)
    };
    guarded(shared, (), || {
        // SAFETY: the worker's boxed state outlives every callback.
        let shared = unsafe { &*shared };
        let slot = shared.recvs.borrow_mut().remove(&id);
        if let Some(slot) = slot {
            shared.deliver(slot.arrival, received_event(slot, status, length));
        }
    });
    // SAFETY: the request UCX completed, freed once, here (never by the caller of
    // ucp_am_recv_data_nbx, which leaves request pointers alone).
    unsafe { sys::ucp_request_free(request) };
}

/// `ucp_send_nbx_callback_t`: an active-message send finished.
pub(crate) unsafe extern "C" fn send_finished(request: *mut c_void, status: sys::ucs_status_t, user_data: *mut c_void) {
    // SAFETY: user_data is the send's OpCtx, alive until its slot is removed, which happens only
    // after this callback ran (or when the worker is gone). Fields copied first.
    let (shared, id) = unsafe {
        let ctx = &*user_data.cast::<OpCtx>();
        (ctx.shared, ctx.id)
    };
    guarded(shared, (), || {
        // SAFETY: the worker's boxed state outlives every callback.
        let shared = unsafe { &*shared };
        let result = if status == sys::UCS_OK { Ok(()) } else { Err(Status::from_code(status)) };
        shared.send_finished(id, result);
    });
    // SAFETY: the request UCX completed, freed once, here.
    unsafe { sys::ucp_request_free(request) };
}

/// `ucp_err_handler_cb_t`: an endpoint failed (its peer is gone).
pub(crate) unsafe extern "C" fn endpoint_failed(arg: *mut c_void, ep: sys::ucp_ep_h, status: sys::ucs_status_t) {
    let shared = arg.cast_const().cast::<Shared>();
    guarded(shared, (), || {
        // SAFETY: `arg` is the worker's boxed state, given at ucp_ep_create; it outlives every
        // callback.
        let shared = unsafe { &*shared };
        let status = Status::from_code(status);
        let id = {
            let mut endpoints = shared.endpoints.borrow_mut();
            let slot = endpoints.entry(ep as usize).or_insert(EpSlot { id: None, failed: None });
            slot.failed = Some(status);
            slot.id
        };
        // An endpoint not yet known (failed inside ucp_ep_create) is reported by connect.
        if let Some(endpoint) = id {
            shared.push_event(Event::EndpointFailed { endpoint, status });
        }
    });
}
