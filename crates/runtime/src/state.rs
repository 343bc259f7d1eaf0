//! The state machine of a unit, as an operator sees it (issue #6): a pure function from a state
//! and a transition to the next state, so that the rules are tested apart from any I/O.
//!
//! ```text
//! Halted ──Configure──▶ Configuring ──Configured──▶ Ready ──Enable──▶ Enabled
//!    ▲                                                ▲ │                │
//!    └──────────────────Halt──────────────────────────┘ │              Stop
//!                                                        └──Drained── Draining ◀┘
//! any ──Fail(reason)──▶ Failed
//! ```
//!
//! A transition to the state a unit is already in, or one that a unit in that state has
//! already made (`Stop` while draining), changes nothing and is not an error: operators and
//! controllers may repeat themselves. Sub-states of a running unit are why it holds back
//! ([`crate::stats::Throttle`]) and what else is wrong with it ([`crate::stats::SubState`]).

/// Where a unit is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u64)]
pub enum UnitState {
    /// Not configured: nothing bound, nothing allocated.
    Halted = 0,
    /// Binding its ports, reaching its peers, allocating its memory.
    Configuring = 1,
    /// Configured; takes no data.
    Ready = 2,
    /// Running: takes, builds and writes events.
    Enabled = 3,
    /// The trigger has stopped: finishing the events under way.
    Draining = 4,
    /// Ended by an error; the reason is among the unit's problems.
    Failed = 5,
}

impl UnitState {
    /// Every state, for exports that list them all.
    pub const ALL: [UnitState; 6] = [
        UnitState::Halted,
        UnitState::Configuring,
        UnitState::Ready,
        UnitState::Enabled,
        UnitState::Draining,
        UnitState::Failed,
    ];

    /// Its stable name.
    pub fn name(self) -> &'static str {
        match self {
            UnitState::Halted => "Halted",
            UnitState::Configuring => "Configuring",
            UnitState::Ready => "Ready",
            UnitState::Enabled => "Enabled",
            UnitState::Draining => "Draining",
            UnitState::Failed => "Failed",
        }
    }

    pub(crate) fn from_code(code: u64) -> Self {
        UnitState::ALL.into_iter().find(|s| *s as u64 == code).unwrap_or(UnitState::Failed)
    }

    /// The state after `transition`, or why it cannot be made from this state.
    pub fn apply(self, transition: Transition) -> Result<UnitState, TransitionError> {
        use Transition as T;
        use UnitState as S;
        let next = match (self, transition) {
            (_, T::Fail) => S::Failed,
            (S::Halted | S::Configuring | S::Failed, T::Configure) => S::Configuring,
            (S::Configuring | S::Ready, T::Configured) => S::Ready,
            (S::Ready | S::Enabled, T::Enable) => S::Enabled,
            (S::Enabled | S::Draining, T::Stop) => S::Draining,
            (S::Draining | S::Ready, T::Drained) => S::Ready,
            (S::Ready | S::Halted, T::Halt) => S::Halted,
            (from, transition) => return Err(TransitionError { from, transition }),
        };
        Ok(next)
    }
}

/// What moves a unit from one state to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    /// Start configuring.
    Configure,
    /// Configuration done.
    Configured,
    /// Start taking data.
    Enable,
    /// The trigger stopped: drain.
    Stop,
    /// Every event under way is finished.
    Drained,
    /// Release everything.
    Halt,
    /// An error the unit cannot go on after.
    Fail,
}

/// A transition a unit in a state cannot make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{transition:?} is not possible in state {}", from.name())]
pub struct TransitionError {
    /// The state.
    pub from: UnitState,
    /// The transition refused.
    pub transition: Transition,
}

#[cfg(test)]
mod tests {
    use super::Transition as T;
    use super::UnitState as S;

    #[test]
    fn a_whole_run_goes_round_the_machine() {
        let mut s = S::Halted;
        for (t, expected) in [
            (T::Configure, S::Configuring),
            (T::Configured, S::Ready),
            (T::Enable, S::Enabled),
            (T::Stop, S::Draining),
            (T::Drained, S::Ready),
            (T::Enable, S::Enabled),
            (T::Stop, S::Draining),
            (T::Drained, S::Ready),
            (T::Halt, S::Halted),
        ] {
            s = s.apply(t).unwrap();
            assert_eq!(s, expected, "{t:?}");
        }
    }

    #[test]
    fn transitions_repeat_without_harm_and_wrong_ones_name_the_state() {
        assert_eq!(S::Enabled.apply(T::Enable), Ok(S::Enabled));
        assert_eq!(S::Draining.apply(T::Stop), Ok(S::Draining));
        assert_eq!(S::Halted.apply(T::Halt), Ok(S::Halted));
        let e = S::Halted.apply(T::Enable).unwrap_err();
        assert_eq!(e.to_string(), "Enable is not possible in state Halted");
        assert!(S::Enabled.apply(T::Halt).is_err(), "a running unit is drained before it halts");
        for s in S::ALL {
            assert_eq!(s.apply(T::Fail), Ok(S::Failed));
            assert_eq!(S::from_code(s as u64), s);
        }
        assert!(S::Failed.apply(T::Enable).is_err(), "a failed unit is configured again first");
    }
}
