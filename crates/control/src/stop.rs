//! How an operator's stop bounds what is left of a run: the drain of the builder and the
//! filter farm's last files end within `controller.stop_timeout_s` of the first stop, or at once
//! on a second ([`OperatorStop`]); a run that ended by its own limit drains as long as it builds,
//! and is given up [`DRAIN_TIMEOUT`] after it last built.

use crate::api::Action;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a stopped run may take to drain before its units are aborted.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The bound an operator's stop (SIGINT, SIGTERM, or the control API's stop) puts on a run:
/// whatever is left of it (draining the builder, the filter farm's last files) ends within
/// `controller.stop_timeout_s` of the first stop, or at once on a second, and is cut short. A
/// service manager's stop (SIGTERM, then SIGKILL after its own time-out) thus finds the run
/// ended with whole files and a summary.
pub struct OperatorStop {
    interrupts: Arc<AtomicU32>,
    timeout: Duration,
    first: std::sync::OnceLock<Instant>,
    said: std::sync::atomic::AtomicBool,
}

impl OperatorStop {
    /// The bound on the stops counted in `interrupts` (the operator's SIGINT and SIGTERM, or the
    /// control API's stop, each adding one).
    pub fn new(interrupts: Arc<AtomicU32>, timeout: Duration) -> Self {
        OperatorStop { interrupts, timeout, first: std::sync::OnceLock::new(), said: false.into() }
    }

    /// The stops counted so far.
    pub fn stops(&self) -> u32 {
        self.interrupts.load(Ordering::SeqCst)
    }

    /// Whether to cut the run short now: a second stop, or the first longer ago than the bound.
    pub fn cut(&self) -> bool {
        let n = self.interrupts.load(Ordering::SeqCst);
        if n == 0 {
            return false;
        }
        let late = self.first.get_or_init(Instant::now).elapsed() > self.timeout;
        if late && n == 1 && !self.said.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                "the run did not end within {:?} of the stop (controller.stop_timeout_s): cutting it short",
                self.timeout
            );
        }
        n > 1 || late
    }
}

/// The control API's stop (`POST /api/v1/stop`) of a run whose operator stops are counted in
/// `interrupts`: as a first Ctrl-C, it stops the trigger and drains; once a stop is counted, it
/// says so and adds none (a second stop from the API would cut the run short).
pub fn stop_action(interrupts: Arc<AtomicU32>) -> Action {
    Arc::new(move || {
        Ok(match interrupts.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => "stopping the trigger; draining".to_owned(),
            Err(_) => "already stopping".to_owned(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_stop_never_cuts_a_second_stop_cuts_at_once_a_first_after_its_time_out() {
        let interrupts = Arc::new(AtomicU32::new(0));
        let operator = OperatorStop::new(interrupts.clone(), Duration::from_millis(20));
        assert!(!operator.cut());
        interrupts.store(1, Ordering::SeqCst);
        assert!(!operator.cut(), "a first stop drains first");
        std::thread::sleep(Duration::from_millis(40));
        assert!(operator.cut(), "a first stop past its bound cuts the run short");
        let again = OperatorStop::new(Arc::new(AtomicU32::new(2)), Duration::from_secs(3600));
        assert!(again.cut(), "a second stop cuts the run short at once");
        assert_eq!(again.stops(), 2);
    }

    #[test]
    fn the_api_stop_counts_as_a_first_stop_once() {
        let interrupts = Arc::new(AtomicU32::new(0));
        let stop = stop_action(interrupts.clone());
        assert_eq!(stop().expect("a stop"), "stopping the trigger; draining");
        assert_eq!(interrupts.load(Ordering::SeqCst), 1);
        assert_eq!(stop().expect("a stop"), "already stopping");
        assert_eq!(interrupts.load(Ordering::SeqCst), 1, "the API never cuts a run short");
    }
}
