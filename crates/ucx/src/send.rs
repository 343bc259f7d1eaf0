//! An active-message send in flight: the memory lent to UCX, owned until the send finishes.

use crate::error::Status;
use crate::sys;
use crate::worker::{OpCtx, RawBox, SendSlot, WorkerInner};
use std::ffi::c_void;
use std::ptr;
use std::rc::Rc;

/// A send's id within its worker, as [`Event::Sent`](crate::Event::Sent) names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SendId(pub(crate) u64);

/// The memory of a send: UCX reads it until the send finishes.
struct InFlight<P> {
    header: Vec<u8>,
    iov: Vec<sys::ucp_dt_iov_t>,
    pieces: Vec<P>,
}

/// A send of [`Endpoint::send`](crate::Endpoint::send): owns the header and the pieces while UCX
/// reads them, and gives the pieces back once the send finished
/// ([`into_pieces`](SendToken::into_pieces)). Not `Send`.
///
/// Dropping a token before its send finished does not end the send: its memory goes to the
/// worker, which drops it after the send finished (or after the worker is destroyed).
pub struct SendToken<P: 'static> {
    worker: Rc<WorkerInner>,
    id: SendId,
    user_data: *mut c_void,
    flight: Option<InFlight<P>>,
}

impl<P: AsRef<[u8]> + 'static> SendToken<P> {
    /// A send about to be handed to UCX: its slot in the worker and its I/O vector.
    pub(crate) fn start(worker: &Rc<WorkerInner>, header: &[u8], pieces: Vec<P>) -> SendToken<P> {
        let id = worker.shared.next_id();
        // Each piece's bytes are taken once, here, and must stay where they are: they do, as the
        // pieces stay in this Vec (whose elements are never moved, mutated or dropped until the
        // send finished) and a `&[u8]` that safe code returns from `as_ref` stays valid, unchanged,
        // as long as its owner is neither mutated, moved nor dropped.
        let iov = pieces
            .iter()
            .map(|piece| {
                let bytes = piece.as_ref();
                sys::ucp_dt_iov_t { buffer: bytes.as_ptr().cast_mut().cast(), length: bytes.len() }
            })
            .collect();
        let ctx = RawBox::new(OpCtx { shared: worker.shared_ptr(), id });
        let user_data = ctx.as_c_ptr();
        worker.shared.sends.borrow_mut().insert(id, SendSlot { _ctx: ctx, result: None, orphan: None });
        SendToken {
            worker: Rc::clone(worker),
            id: SendId(id),
            user_data,
            flight: Some(InFlight { header: header.to_vec(), iov, pieces }),
        }
    }

    /// A send that ends before reaching UCX (its endpoint failed).
    pub(crate) fn finished_at_once(
        worker: &Rc<WorkerInner>,
        header: &[u8],
        pieces: Vec<P>,
        result: Result<(), Status>,
    ) -> SendToken<P> {
        let token = SendToken::start(worker, header, pieces);
        worker.shared.send_finished(token.id.0, result);
        token
    }

    /// What `ucp_am_send_nbx` is given: header, I/O vector, and the callback's user data.
    pub(crate) fn ucx_view(&self) -> (*const c_void, usize, *const c_void, usize, *mut c_void) {
        let flight = self.flight.as_ref().expect("a token has its memory until it is taken");
        let header = if flight.header.is_empty() { ptr::null() } else { flight.header.as_ptr().cast() };
        (header, flight.header.len(), flight.iov.as_ptr().cast(), flight.iov.len(), self.user_data)
    }
}

impl<P: 'static> SendToken<P> {
    /// The send's id.
    pub fn id(&self) -> SendId {
        self.id
    }

    /// `None` while the send is in flight; then how it ended.
    pub fn result(&self) -> Option<Result<(), Status>> {
        self.worker.shared.sends.borrow().get(&self.id.0).and_then(|slot| slot.result)
    }

    /// Whether the send finished (its [`Event::Sent`](crate::Event::Sent) is queued or taken).
    pub fn is_finished(&self) -> bool {
        self.result().is_some()
    }

    /// The pieces back, with how the send ended, once it finished; else the token itself.
    #[allow(clippy::type_complexity)]
    pub fn into_pieces(mut self) -> Result<(Vec<P>, Result<(), Status>), SendToken<P>> {
        let Some(result) = self.result() else {
            return Err(self);
        };
        self.worker.shared.sends.borrow_mut().remove(&self.id.0);
        let flight = self.flight.take().expect("a token has its memory until it is taken");
        Ok((flight.pieces, result))
    }
}

impl<P: 'static> Drop for SendToken<P> {
    fn drop(&mut self) {
        let Some(flight) = self.flight.take() else {
            return;
        };
        let mut sends = self.worker.shared.sends.borrow_mut();
        match sends.get_mut(&self.id.0) {
            Some(slot) if slot.result.is_none() => {
                // Still in flight: the worker keeps the memory until the send finished.
                slot.orphan = Some(Box::new(flight));
            }
            Some(_) => {
                let slot = sends.remove(&self.id.0);
                drop(sends);
                drop(slot);
                drop(flight);
            }
            None => {
                // Cannot happen (a slot lives until its token is done with it); should it, the
                // memory is leaked rather than freed under UCX.
                std::mem::forget(flight);
            }
        }
    }
}

impl<P: 'static> std::fmt::Debug for SendToken<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendToken").field("id", &self.id).field("result", &self.result()).finish()
    }
}
