//! Memory mapped for UCX (`ucp_mem_map`): the caller's bytes, registered with the transports.

use crate::context::{Context, ContextInner};
use crate::error::{Error, Status};
use crate::sys;
use std::ops::Range;
use std::ptr;
use std::rc::Rc;

/// The caller's bytes mapped for UCX (`ucp_mem_map`): registered with the transports that need
/// it, so that sends from them need no registration of their own. The region owns the bytes, so
/// they live as long as they are mapped; they are unmapped (`ucp_mem_unmap`) when it is dropped
/// or taken back with [`into_vec`](MemRegion::into_vec). Read-only while mapped. Not `Send`.
///
/// To send from it, share it (`Rc<MemRegion>`) and send [`MappedSlice`]s of it: each keeps the
/// region (and its mapping) alive while UCX reads it.
pub struct MemRegion {
    context: Rc<ContextInner>,
    memh: sys::ucp_mem_h,
    data: Vec<u8>,
}

impl MemRegion {
    /// Maps `data` (which must not be empty) for `context`.
    pub fn new(context: &Context, data: Vec<u8>) -> Result<MemRegion, Error> {
        if data.is_empty() {
            return Err(Error::Call { call: "ucp_mem_map", status: Status::INVALID_PARAM });
        }
        let params = sys::ucp_mem_map_params_t {
            field_mask: sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            address: data.as_ptr().cast_mut().cast(),
            length: data.len(),
            flags: 0,
            prot: 0,
            memory_type: 0,
        };
        let mut memh = ptr::null_mut();
        // SAFETY: the context is live (held by the region); `data.len()` bytes at the address are
        // owned by the region and stay where they are (the Vec is never grown, shrunk or mutated
        // while mapped) until after ucp_mem_unmap. UCX registers them; nothing writes them (no
        // remote key is ever given out).
        Status::check(unsafe { sys::ucp_mem_map(context.inner.handle, &params, &mut memh) }, "ucp_mem_map")?;
        Ok(MemRegion { context: Rc::clone(&context.inner), memh, data })
    }

    /// The mapped bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.data
    }

    /// How many bytes are mapped.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether it maps no byte (never: an empty region cannot be made).
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Unmaps the bytes and gives them back.
    pub fn into_vec(mut self) -> Vec<u8> {
        self.unmap();
        std::mem::take(&mut self.data)
    }

    /// A piece of a shared region, to send.
    ///
    /// # Panics
    ///
    /// When `range` is not within the region (as slicing does).
    pub fn slice(self: &Rc<MemRegion>, range: Range<usize>) -> MappedSlice {
        assert!(
            range.start <= range.end && range.end <= self.len(),
            "range {range:?} is not within the region's {} bytes",
            self.len()
        );
        MappedSlice { region: Rc::clone(self), range }
    }

    fn unmap(&mut self) {
        let memh = std::mem::replace(&mut self.memh, ptr::null_mut());
        if !memh.is_null() {
            // SAFETY: the handle from ucp_mem_map on this live context, unmapped once.
            unsafe { sys::ucp_mem_unmap(self.context.handle, memh) };
        }
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        self.unmap();
    }
}

impl std::fmt::Debug for MemRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemRegion({} bytes)", self.data.len())
    }
}

/// A range of a shared [`MemRegion`], which it keeps mapped: a piece to send.
#[derive(Clone, Debug)]
pub struct MappedSlice {
    region: Rc<MemRegion>,
    range: Range<usize>,
}

impl MappedSlice {
    /// The region it is a piece of.
    pub fn region(&self) -> &Rc<MemRegion> {
        &self.region
    }
}

impl AsRef<[u8]> for MappedSlice {
    fn as_ref(&self) -> &[u8] {
        &self.region.as_slice()[self.range.clone()]
    }
}
