//! Endpoints: a connection from a worker to a peer worker, made from the peer's address.

use crate::error::{Error, ErrorHandling, Status};
use crate::send::SendToken;
use crate::sys;
use crate::worker::{AmId, Closing, EpSlot, Event, Worker, WorkerAddress, WorkerInner, endpoint_failed};
use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// An endpoint's id within its worker, as events name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(pub(crate) u64);

/// How an endpoint is closed (`ucp_ep_close_nbx`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseMode {
    /// Its sends in flight are finished first, and the peer is told.
    Flush,
    /// `UCP_EP_CLOSE_FLAG_FORCE`: at once, without the peer; its sends in flight finish with an
    /// error ([`Status::CANCELED`], UCX says). Only for endpoints of [`ErrorHandling::Peer`]
    /// (UCX 1.13 refuses it for others, and asks that the peer's be of it too).
    Force,
}

/// An endpoint to a peer worker. Not `Send` (as its worker).
///
/// With [`ErrorHandling::Peer`], when the peer is gone UCX fails the endpoint: it is reported
/// once, as [`Event::EndpointFailed`] by the worker's progress and by
/// [`failure`](Endpoint::failure); its sends in flight finish with an error, and new sends fail
/// at once. What counts as gone: the peer's worker destroyed or its process ended (over TCP,
/// seen at the next progress). A peer that only closes *its* endpoint to this worker is not gone:
/// its worker still receives what this endpoint sends.
///
/// Dropping an endpoint starts its close without waiting (flush, or force if it failed); the
/// worker finishes it in later progress. [`close`](Endpoint::close) waits, within a bound.
pub struct Endpoint {
    worker: Rc<WorkerInner>,
    handle: Cell<sys::ucp_ep_h>,
    id: EndpointId,
    mode: ErrorHandling,
}

impl Endpoint {
    pub(crate) fn connect(worker: &Worker, address: &WorkerAddress, mode: ErrorHandling) -> Result<Endpoint, Error> {
        let inner = &worker.inner;
        let err_mode = match mode {
            ErrorHandling::Peer => sys::UCP_ERR_HANDLING_MODE_PEER,
            ErrorHandling::None => sys::UCP_ERR_HANDLING_MODE_NONE,
        };
        let params = sys::ucp_ep_params_t {
            field_mask: sys::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                | sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER,
            address: address.as_bytes().as_ptr().cast(),
            err_mode,
            err_handler: sys::ucp_err_handler_t {
                cb: Some(endpoint_failed),
                arg: inner.shared_ptr().cast_mut().cast::<c_void>(),
            },
            user_data: ptr::null_mut(),
            flags: 0,
            sockaddr: sys::ucs_sock_addr_t { addr: ptr::null(), addrlen: 0 },
            conn_request: ptr::null_mut(),
            name: ptr::null(),
            local_sockaddr: sys::ucs_sock_addr_t { addr: ptr::null(), addrlen: 0 },
        };
        let mut handle = ptr::null_mut();
        // SAFETY: the worker is live; params are valid for the call (the address bytes are a
        // worker's address, which WorkerAddress guarantees: made by a worker or by the caller's
        // unsafe promise; UCX reads it during the call only). The error handler's argument is the
        // worker's boxed state, which outlives the endpoint and every callback.
        let status = unsafe { sys::ucp_ep_create(inner.handle, &params, &mut handle) };
        if status != sys::UCS_OK {
            return Err(Error::Connect { mode, status: Status::from_code(status) });
        }
        let shared = &inner.shared;
        let id = EndpointId(shared.next_id());
        let failed = {
            let mut endpoints = shared.endpoints.borrow_mut();
            let slot = endpoints.entry(handle as usize).or_insert(EpSlot { id: None, failed: None });
            if slot.id.is_some() {
                // An endpoint closed at this address whose close is not reaped yet: not this one.
                *slot = EpSlot { id: None, failed: None };
            }
            slot.id = Some(id);
            slot.failed
        };
        if let Some(status) = failed {
            shared.push_event(Event::EndpointFailed { endpoint: id, status });
        }
        Ok(Endpoint { worker: Rc::clone(inner), handle: Cell::new(handle), id, mode })
    }

    /// This endpoint's id, as events name it.
    pub fn id(&self) -> EndpointId {
        self.id
    }

    /// The error handling it was made with.
    pub fn error_handling(&self) -> ErrorHandling {
        self.mode
    }

    /// The status it failed with, once UCX reported its failure (in a progress call).
    pub fn failure(&self) -> Option<Status> {
        self.worker.shared.endpoints.borrow().get(&(self.handle.get() as usize)).and_then(|slot| slot.failed)
    }

    /// Sends an active message `am_id` (`ucp_am_send_nbx`): `header` (copied, and kept until the
    /// send finishes, as UCX 1.13 needs it) and the data of `pieces` as one message, described to
    /// UCX as an I/O vector (`UCP_DATATYPE_IOV`) over the pieces' own memory: this crate copies
    /// none of it (UCX copies small messages into its buffers and sends large ones from the
    /// memory itself, zero-copy or by rendezvous as it selects).
    ///
    /// The pieces are the caller's memory lent to UCX: the returned [`SendToken`] owns them until
    /// the send finishes, and gives them back then. The send's end always comes as exactly one
    /// [`Event::Sent`] (even when it finished at once or failed at once, e.g. on a failed
    /// endpoint), and the token says it too.
    pub fn send<P: AsRef<[u8]> + 'static>(&self, am_id: AmId, header: &[u8], pieces: Vec<P>) -> SendToken<P> {
        let shared = &self.worker.shared;
        if let Some(status) = self.failure() {
            return SendToken::finished_at_once(&self.worker, header, pieces, Err(status));
        }
        let token = SendToken::start(&self.worker, header, pieces);
        let (header_ptr, header_len, iov_ptr, iov_len, user_data) = token.ucx_view();
        let mut params = sys::ucp_request_param_t::empty();
        params.op_attr_mask =
            sys::UCP_OP_ATTR_FIELD_CALLBACK | sys::UCP_OP_ATTR_FIELD_USER_DATA | sys::UCP_OP_ATTR_FIELD_DATATYPE;
        params.cb = sys::ucp_request_param_cb { send: Some(crate::worker::send_finished) };
        params.user_data = user_data;
        params.datatype = sys::UCP_DATATYPE_IOV;
        // SAFETY: the endpoint and its worker are live. The header, the iov array and every piece
        // it points to are owned by the token, whose memory (the Vecs' heap buffers and the
        // pieces' bytes) neither moves nor is mutated nor freed until the send's slot says it
        // finished: the token gives it back only then, and a token dropped earlier hands it to
        // the worker, which drops it after the callback (or after destroying the worker). UCX
        // only reads these bytes. user_data is the send's context, freed with its slot.
        let request = unsafe {
            sys::ucp_am_send_nbx(self.handle.get(), am_id.into(), header_ptr, header_len, iov_ptr, iov_len, &params)
        };
        if !sys::ucs_ptr_is_ptr(request) {
            // Finished at once (NULL) or failed: no callback comes.
            let status = sys::ucs_ptr_raw_status(request);
            let result = if status == sys::UCS_OK { Ok(()) } else { Err(Status::from_code(status)) };
            shared.send_finished(token.id().0, result);
        }
        // Else in flight: its callback frees the request; it is not touched here.
        token
    }

    /// Closes the endpoint and waits, progressing the worker, at most `timeout` for the close to
    /// finish. A failed endpoint (of [`ErrorHandling::Peer`]) is closed with
    /// [`CloseMode::Force`] whatever `mode` says, and its close is `Ok`. Otherwise an error says
    /// that the close did not end cleanly (e.g. a flush that could not reach the peer); the
    /// endpoint is closed all the same. After the time-out the close goes on in the worker's
    /// later progress, and [`Error::TimedOut`] says so. A forced close of an endpoint made with
    /// [`ErrorHandling::None`] is refused (`UCS_ERR_INVALID_PARAM`, as UCX 1.13 refuses it); the
    /// endpoint is then closed (flushed) as when dropped. Events that come meanwhile are queued
    /// as usual.
    pub fn close(self, mode: CloseMode, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let worker = Worker { inner: Rc::clone(&self.worker) };
        let failed = self.failure().is_some();
        let mode = if failed && self.mode == ErrorHandling::Peer { CloseMode::Force } else { mode };
        if mode == CloseMode::Force && self.mode == ErrorHandling::None {
            return Err(Error::Call { call: "ucp_ep_close_nbx (forced)", status: Status::INVALID_PARAM });
        }
        let Some(request) = self.start_close(mode)? else {
            return Ok(());
        };
        loop {
            // SAFETY: a close request from ucp_ep_close_nbx, not freed yet: freed below once, or
            // handed to the worker, which frees it.
            let status = unsafe { sys::ucp_request_check_status(request.request) };
            if status != sys::UCS_INPROGRESS {
                // SAFETY: as above, freed once.
                unsafe { sys::ucp_request_free(request.request) };
                self.worker.shared.forget_endpoint(request.ep, request.id);
                return if failed { Ok(()) } else { Status::check(status, "ucp_ep_close_nbx") };
            }
            let now = Instant::now();
            if now >= deadline {
                self.worker.shared.closing.borrow_mut().push(request);
                return Err(Error::TimedOut { what: "closing the endpoint", after: timeout });
            }
            worker.wait((deadline - now).min(Duration::from_millis(10)))?;
        }
    }

    /// Starts closing (once): `None` when it finished at once, else its request (which the
    /// caller frees or hands to the worker).
    fn start_close(&self, mode: CloseMode) -> Result<Option<Closing>, Error> {
        let handle = self.handle.replace(ptr::null_mut());
        if handle.is_null() {
            return Ok(None);
        }
        let mut params = sys::ucp_request_param_t::empty();
        if mode == CloseMode::Force {
            params.op_attr_mask = sys::UCP_OP_ATTR_FIELD_FLAGS;
            params.flags = sys::UCP_EP_CLOSE_FLAG_FORCE;
        }
        // SAFETY: the endpoint is live and closed once (its handle is taken above); params are
        // valid for the call. Callbacks of its sends may run inside (a forced close cancels them).
        let request = unsafe { sys::ucp_ep_close_nbx(handle, &params) };
        let ep = handle as usize;
        if sys::ucs_ptr_is_ptr(request) {
            return Ok(Some(Closing { request, ep, id: self.id }));
        }
        self.worker.shared.forget_endpoint(ep, self.id);
        Status::check(sys::ucs_ptr_raw_status(request), "ucp_ep_close_nbx").map(|()| None)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if self.handle.get().is_null() {
            return;
        }
        let failed = self.failure().is_some() && self.mode == ErrorHandling::Peer;
        let mode = if failed { CloseMode::Force } else { CloseMode::Flush };
        if let Ok(Some(request)) = self.start_close(mode) {
            self.worker.shared.closing.borrow_mut().push(request);
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("id", &self.id).field("mode", &self.mode).finish()
    }
}
