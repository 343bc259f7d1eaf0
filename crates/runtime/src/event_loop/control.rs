//! Run control's handle on a running node, and the poller it wakes.

use super::{NodeError, WAKER, io_err};
use crate::stats::UnitStats;
use mio::{Poll, Waker};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_evb::types::FedId;

/// Tells a running node what run control wants.
#[derive(Clone)]
pub struct Control {
    waker: Arc<Waker>,
    stop_trigger: Arc<AtomicBool>,
    /// The stop line's events ([`Control::streams_end_after`]); `u64::MAX` while none is drawn.
    stop_line: Arc<AtomicU64>,
    abort: Arc<AtomicBool>,
    enabled: Arc<AtomicBool>,
    /// FEDs an operator asked to mask, not yet taken by the unit.
    masks: Arc<Mutex<Vec<FedId>>>,
}

/// FEDs an operator may ask to mask at once before the unit has taken them: a bound on what a
/// caller can queue, far above what any operator does.
pub const MAX_MASKS_QUEUED: usize = 4096;

impl Control {
    /// EVM: the trigger is off (as when the trigger stream ends): drain and end the run.
    pub fn stop_trigger(&self) {
        self.stop_trigger.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }

    /// Run control drew the emulators' stop line: every FED stream, the trigger's too, ends
    /// after `events` events of the run (what the stop line says they will have sent). A stream
    /// that ends there ends cleanly; the trigger stream's end there is the trigger's stop, as
    /// [`Control::stop_trigger`] is. A line drawn again only moves it earlier.
    pub fn streams_end_after(&self, events: u64) {
        self.stop_line.fetch_min(events, Ordering::SeqCst);
        let _ = self.waker.wake();
    }

    /// The stop line's events, once drawn.
    pub(crate) fn stop_line(&self) -> Option<u64> {
        Some(self.stop_line.load(Ordering::SeqCst)).filter(|&n| n != u64::MAX)
    }

    /// RU: masks `fed` for the rest of the run, at an operator's word: the events that wait for
    /// it go on without it, flagged incomplete and counted against it. The unit takes it on its
    /// next pass and says it (or that the FED is not one of its). False if too many masks wait
    /// already (4,096 of them).
    pub fn mask_fed(&self, fed: FedId) -> bool {
        let mut masks = self.masks.lock().unwrap_or_else(|e| e.into_inner());
        if masks.len() >= MAX_MASKS_QUEUED {
            return false;
        }
        masks.push(fed);
        drop(masks);
        let _ = self.waker.wake();
        true
    }

    /// The FEDs asked to be masked since the last look.
    pub(crate) fn take_masks(&self) -> Vec<FedId> {
        std::mem::take(&mut *self.masks.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Stops the unit now, whatever it holds.
    pub fn abort(&self) {
        self.abort.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }

    /// Keeps the unit in Ready once configured (ports bound, peers reached, memory allocated),
    /// taking no data, until [`Control::enable`]: a controller configures every unit before it
    /// enables any. Call before the node runs; without it a unit enables itself.
    pub fn hold_in_ready(&self) {
        self.enabled.store(false, Ordering::SeqCst);
    }

    /// Lets a unit held in Ready take data; true if it was held (false: it was enabled
    /// already, and this changes nothing).
    pub fn enable(&self) -> bool {
        let was_held = !self.enabled.swap(true, Ordering::SeqCst);
        let _ = self.waker.wake();
        was_held
    }

    /// Waits in Ready until enabled, or fails if aborted meanwhile. Unbounded by design: a
    /// unit in Ready waits for its operator; an abort (Ctrl-C, a controller) ends the wait.
    /// Its heartbeat goes on meanwhile: a unit waiting in Ready is not stalled.
    pub(crate) fn wait_enabled(&self, unit: &str, stats: &UnitStats) -> Result<(), NodeError> {
        while !self.enabled.load(Ordering::SeqCst) {
            if self.aborted() {
                return Err(NodeError::Aborted(format!("{unit} was never enabled")));
            }
            stats.heartbeats.add(1);
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// A node's poller and the run-control handle that wakes it.
pub(crate) fn poller() -> Result<(Poll, Control), NodeError> {
    let poll = Poll::new().map_err(io_err("creating a poller"))?;
    let waker = Waker::new(poll.registry(), WAKER).map_err(io_err("creating a waker"))?;
    let control = Control {
        waker: Arc::new(waker),
        stop_trigger: Arc::new(AtomicBool::new(false)),
        stop_line: Arc::new(AtomicU64::new(u64::MAX)),
        abort: Arc::new(AtomicBool::new(false)),
        enabled: Arc::new(AtomicBool::new(true)),
        masks: Arc::new(Mutex::new(Vec::new())),
    };
    Ok((poll, control))
}

impl Control {
    /// The poller's one waker, for threads that hand the unit work.
    pub(crate) fn waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// Whether run control asked to stop the trigger since the last look (asked once, taken once).
    pub(crate) fn take_stop_trigger(&self) -> bool {
        self.stop_trigger.swap(false, Ordering::SeqCst)
    }

    pub(crate) fn aborted(&self) -> bool {
        self.abort.load(Ordering::SeqCst)
    }
}
