//! The state machine of a pipestream instance, as run control drives it: a pure function from
//! a state and a transition to the next state, tested apart from any I/O.
//!
//! ```text
//! Halted ──configure──▶ Configured ──connect──▶ Connecting ──connected──▶ Connected
//!   ▲  ▲                    │ ▲ configure (again)                           │ start
//!   │  └────disconnect──────┘                                              ▼
//!   └──────────disconnect──── Stopped ◀──stopped── Stopping ◀──stop──── Running
//! any ──fail──▶ Failed ──disconnect──▶ Halted
//! ```
//! `disconnect` is allowed from every state: it drops the connections and the threads, and
//! is how an operator gets out of anything.

use serde::{Deserialize, Serialize};

/// Where an instance is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// Nothing bound, nothing connected.
    Halted,
    /// Its part of a point taken, its server's listener bound.
    Configured,
    /// Calling the servers, taking the clients' calls.
    Connecting,
    /// Every connection up; nothing sent.
    Connected,
    /// Clients sending.
    Running,
    /// Clients finishing what they started: waiting for the last acknowledgements.
    Stopping,
    /// Every message sent was acknowledged; the figures are final.
    Stopped,
    /// An error ended the point; it is in the status.
    Failed,
}

/// What moves an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Run control gives the instance its part of a point.
    Configure,
    /// Run control tells it to connect.
    Connect,
    /// Its connections are up.
    Connected,
    /// Run control lets the clients send.
    Start,
    /// Run control stops the clients.
    Stop,
    /// The clients have drained.
    Stopped,
    /// Run control drops everything.
    Disconnect,
    /// An error.
    Fail,
}

/// A transition a state does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {transition:?} from {from:?}")]
pub struct TransitionError {
    /// The state.
    pub from: State,
    /// The transition asked for.
    pub transition: Transition,
}

impl State {
    /// The state after `transition`.
    pub fn apply(self, transition: Transition) -> Result<State, TransitionError> {
        use State as S;
        use Transition as T;
        Ok(match (self, transition) {
            (_, T::Fail) => S::Failed,
            (_, T::Disconnect) => S::Halted,
            (S::Halted | S::Configured, T::Configure) => S::Configured,
            (S::Configured, T::Connect) => S::Connecting,
            (S::Connecting, T::Connected) => S::Connected,
            (S::Connected, T::Start) => S::Running,
            (S::Running, T::Stop) => S::Stopping,
            (S::Stopping, T::Stopped) => S::Stopped,
            (from, transition) => return Err(TransitionError { from, transition }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_goes_round_and_wrong_orders_are_refused() {
        let mut s = State::Halted;
        for t in [
            Transition::Configure,
            Transition::Connect,
            Transition::Connected,
            Transition::Start,
            Transition::Stop,
            Transition::Stopped,
            Transition::Disconnect,
        ] {
            s = s.apply(t).unwrap();
        }
        assert_eq!(s, State::Halted);
        assert!(State::Halted.apply(Transition::Start).is_err());
        assert!(State::Connected.apply(Transition::Configure).is_err());
        assert!(State::Stopped.apply(Transition::Start).is_err(), "a point runs once");
        assert_eq!(State::Running.apply(Transition::Fail), Ok(State::Failed));
        assert_eq!(State::Failed.apply(Transition::Disconnect), Ok(State::Halted));
    }
}
