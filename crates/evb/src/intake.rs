//! Which front-end connections an RU takes: the rule of its FEROL (or DTH) listener, without the
//! sockets. Every connection waits, unnamed, until its first block header names its FED; then it
//! becomes that FED's stream, or is refused (a FED of another RU, one already connected). As many
//! connections may wait at once as the RU has streams not yet connected, and a few more: every
//! configured front end always finds room, whatever the order in which they come, and strangers
//! that say nothing cannot hold more than the spare places.

use crate::types::FedId;

/// Why a front-end connection is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Too many connections wait to name their FED already.
    #[error("{waiting} connections have not yet named their FED, for {unconnected} streams not yet connected")]
    Full {
        /// Connections waiting.
        waiting: usize,
        /// Streams of the RU not yet connected.
        unconnected: usize,
    },
    /// Its first block header names a FED this RU does not read.
    #[error("FED {fed} is not one of this RU's {feds:?}")]
    NotOurs {
        /// The FED it named.
        fed: FedId,
        /// This RU's FEDs.
        feds: Vec<FedId>,
    },
    /// Its FED's stream is connected already.
    #[error("FED {fed} is already connected")]
    AlreadyConnected {
        /// The FED.
        fed: FedId,
    },
}

/// The front-end connections of one RU.
#[derive(Debug, Clone)]
pub struct Intake {
    feds: Vec<FedId>,
    connected: Vec<bool>,
    unnamed: usize,
    spare: usize,
}

impl Intake {
    /// The intake of an RU that reads `feds`, with `spare` places for connections beyond its
    /// streams not yet connected.
    pub fn new(feds: Vec<FedId>, spare: usize) -> Self {
        Intake { connected: vec![false; feds.len()], feds, unnamed: 0, spare }
    }

    /// Streams not yet connected.
    pub fn unconnected(&self) -> usize {
        self.connected.iter().filter(|&&c| !c).count()
    }

    /// Connections waiting to name their FED.
    pub fn waiting(&self) -> usize {
        self.unnamed
    }

    /// A new connection: it may wait to name its FED, or is refused for want of room.
    pub fn accept(&mut self) -> Result<(), Refusal> {
        let unconnected = self.unconnected();
        if self.unnamed >= unconnected + self.spare {
            return Err(Refusal::Full { waiting: self.unnamed, unconnected });
        }
        self.unnamed += 1;
        Ok(())
    }

    /// A waiting connection's first block header named `fed`: the index of its stream in the
    /// RU's list, or why it is refused. Either way it no longer waits.
    pub fn name(&mut self, fed: FedId) -> Result<usize, Refusal> {
        self.unnamed = self.unnamed.saturating_sub(1);
        let Some(i) = self.feds.iter().position(|&f| f == fed) else {
            return Err(Refusal::NotOurs { fed, feds: self.feds.clone() });
        };
        if std::mem::replace(&mut self.connected[i], true) {
            return Err(Refusal::AlreadyConnected { fed });
        }
        Ok(i)
    }

    /// A waiting connection closed, or named nothing in time: it no longer waits.
    pub fn forget_unnamed(&mut self) {
        self.unnamed = self.unnamed.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configured_stream_finds_room_however_many_strangers_wait_before_it() {
        let feds: Vec<FedId> = (0..100).collect();
        let mut intake = Intake::new(feds, 2);
        // Every front end connects before any names its FED: 100 wait, and 2 strangers more.
        for _ in 0..102 {
            intake.accept().unwrap();
        }
        assert_eq!(intake.accept(), Err(Refusal::Full { waiting: 102, unconnected: 100 }));
        assert_eq!(intake.name(500), Err(Refusal::NotOurs { fed: 500, feds: (0..100).collect() }));
        intake.forget_unnamed();
        for fed in (0..100).rev() {
            assert_eq!(intake.name(fed), Ok(usize::from(fed)));
        }
        assert_eq!((intake.unconnected(), intake.waiting()), (0, 0));
        intake.accept().unwrap();
        assert_eq!(intake.name(7), Err(Refusal::AlreadyConnected { fed: 7 }));
        intake.accept().unwrap();
        intake.accept().unwrap();
        assert!(intake.accept().is_err(), "with every stream there, the spare places only");
    }
}
