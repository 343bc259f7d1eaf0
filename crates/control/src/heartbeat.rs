//! Stalled units told from their loop heartbeats.

/// Watches units' loop heartbeats ([`UnitStats::heartbeats`](tessera_runtime::stats::UnitStats::heartbeats)): a unit whose count has not
/// moved for longer than the time-out is stalled, alive or not.
#[derive(Debug)]
pub struct HeartbeatWatch {
    timeout: std::time::Duration,
    /// By unit: the count last seen and when it last moved.
    last: std::collections::BTreeMap<String, (u64, std::time::Instant)>,
}

impl HeartbeatWatch {
    /// A watch that calls a unit stalled after `timeout` without a beat.
    pub fn new(timeout: std::time::Duration) -> Self {
        HeartbeatWatch { timeout, last: std::collections::BTreeMap::new() }
    }

    /// Takes `unit`'s count seen at `now`; how long it has not moved if that is longer than
    /// the time-out (it is stalled), else `None`. Only units whose loop runs should be shown:
    /// a unit that has ended beats no more.
    pub fn check(&mut self, unit: &str, count: u64, now: std::time::Instant) -> Option<std::time::Duration> {
        let (last, moved) = self.last.entry(unit.to_owned()).or_insert((count, now));
        if *last != count {
            (*last, *moved) = (count, now);
            return None;
        }
        let still = now.duration_since(*moved);
        (still > self.timeout).then_some(still)
    }

    /// Forgets `unit`'s count: its loop is not running (a restarted unit still configuring);
    /// watching starts again at its next count.
    pub fn forget(&mut self, unit: &str) {
        self.last.remove(unit);
    }

    /// Whether `unit` has been seen beating at least once.
    pub fn knows(&self, unit: &str) -> bool {
        self.last.contains_key(unit)
    }
}
