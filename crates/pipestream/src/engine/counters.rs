//! An instance's figures: counters its threads add to as they go ([`Counters`]), which run
//! control reads at any time as a copy ([`Figures`]).

use crate::core::Errors;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// The figures of an instance, shared by its threads and read by run control.
#[derive(Debug, Default)]
pub struct Counters {
    /// Messages its client queued.
    pub messages_sent: AtomicU64,
    /// Messages its client had acknowledged (raw: written whole).
    pub messages_completed: AtomicU64,
    /// Messages its server received whole (raw: payload bytes over the message size).
    pub messages_received: AtomicU64,
    /// Payload bytes its server received.
    pub bytes_received: AtomicU64,
    /// Messages its server found missing.
    pub lost: AtomicU64,
    /// Messages its server found out of order.
    pub out_of_order: AtomicU64,
    /// Messages its server found corrupt.
    pub corrupt: AtomicU64,
    /// Connections a server refused (a wrong address, hello or session).
    pub refused: AtomicU64,
}

/// A copy of [`Counters`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// Messages its client queued.
    pub messages_sent: u64,
    /// Messages its client had completed.
    pub messages_completed: u64,
    /// Messages its server received whole.
    pub messages_received: u64,
    /// Payload bytes its server received.
    pub bytes_received: u64,
    /// Messages its server found missing.
    pub lost: u64,
    /// Messages its server found out of order.
    pub out_of_order: u64,
    /// Messages its server found corrupt.
    pub corrupt: u64,
    /// Connections its server refused.
    pub refused: u64,
}

impl Figures {
    /// Every message its server found wrong.
    pub fn errors(&self) -> u64 {
        self.lost + self.out_of_order + self.corrupt
    }
}

impl Counters {
    /// The figures now.
    pub fn figures(&self) -> Figures {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Figures {
            messages_sent: l(&self.messages_sent),
            messages_completed: l(&self.messages_completed),
            messages_received: l(&self.messages_received),
            bytes_received: l(&self.bytes_received),
            lost: l(&self.lost),
            out_of_order: l(&self.out_of_order),
            corrupt: l(&self.corrupt),
            refused: l(&self.refused),
        }
    }

    pub(super) fn add_errors(&self, e: &Errors) {
        self.lost.fetch_add(e.lost, Ordering::Relaxed);
        self.out_of_order.fetch_add(e.out_of_order, Ordering::Relaxed);
        self.corrupt.fetch_add(e.corrupt, Ordering::Relaxed);
    }
}
