//! The BU's connections: reading the RUs' data and the EVM's messages into the core (each
//! frame kept where it was read), losing or refusing a peer, and flushing its requests.

use super::*;

impl BuLoop {
    /// Reads the connections while the store has room for a frame; true if some have more.
    pub(super) fn read_conns(&mut self) -> Result<bool, NodeError> {
        let mut more = false;
        let tokens: Vec<Token> = self.conns.iter().filter(|(_, c)| c.readable).map(|(t, _)| *t).collect();
        for token in tokens {
            if self.store.held() + self.cfg.max_frame_bytes as usize > self.cfg.frame_store_bytes {
                // Room comes back as the writers finish; their completion wakes the loop.
                return Ok(false);
            }
            let mut inputs = Vec::new();
            let mut refused = None;
            let conn = self.conns.get_mut(&token).expect("listed");
            let store = &mut self.store;
            let pass = conn.read(|peer, decoded, frame| match store.insert(decoded, frame) {
                Ok(msg) => inputs.push((peer, msg)),
                Err(e) => refused = Some(e),
            });
            more |= pass.more;
            let ip = self.conns[&token].ip;
            let from_allowed = self.cfg.allowed_peers.as_ref().is_none_or(|ips| ip.is_some_and(|ip| ips.contains(&ip)));
            if let Some(peer) = pass.linked
                && (!matches!(peer, Peer::Ru(r) if r > 0 && r < self.cfg.bu.n_ru) || !from_allowed)
            {
                let address = self.conns[&token].address.clone();
                self.stats.links_refused.add(1);
                self.stats.problem(format!("BU {}: refused {peer:?} calling from {address}", self.cfg.bu.bu));
                if let Some(mut c) = self.conns.remove(&token) {
                    c.deregister(self.poll.registry());
                }
                continue;
            }
            if let Some(e) = refused {
                return Err(NodeError::StoreFull { bu: self.cfg.bu.bu, source: e });
            }
            self.stats.data_messages.add(inputs.iter().filter(|(_, m)| !m.is_control()).count() as u64);
            if let Some(room) = self.room.as_mut().filter(|r| r.counts_parts()) {
                for (_, msg) in &inputs {
                    if let tessera_evb::msg::Message::Data { ru, parts, .. } = msg {
                        room.saw_parts(*ru, parts);
                    }
                }
            }
            let now = self.now();
            for (from, msg) in inputs {
                self.core.handle(now, Input::Message { from, msg });
            }
            if let Some(why) = pass.closed {
                self.close_conn(token, why)?;
            }
        }
        Ok(more)
    }

    /// Closes the connections whose link opening is not done within the connect time-out: an
    /// RU that never proves itself is refused; an EVM that never challenges is lost.
    pub(super) fn close_overdue_links(&mut self, enabled_at: Instant) -> Result<(), NodeError> {
        let timeout = self.cfg.connect_timeout;
        for (token, why) in crate::conn::overdue_links(&self.conns, timeout, enabled_at) {
            self.close_conn(token, Some(why))?;
        }
        Ok(())
    }

    /// A connection ended: losing the EVM before the end of run fails the BU; a caller that
    /// never proved itself a unit of this run is counted as refused.
    pub(super) fn close_conn(&mut self, token: Token, why: Option<ConnError>) -> Result<(), NodeError> {
        let Some(mut c) = self.conns.remove(&token) else { return Ok(()) };
        c.deregister(self.poll.registry());
        // The EVM's last messages (its end of run) may have come with its close.
        self.dispatch()?;
        if token == EVM_CONN {
            // Its end of run came: the record may still be on its way to the disk (the loop
            // waits for it).
            if self.ended || self.core.run_ended() {
                return Ok(());
            }
            return Err(NodeError::EvmLostBeforeEnd {
                bu: self.cfg.bu.bu,
                why: why.map(|w| w.to_string()),
                pending: self.core.pending(),
            });
        }
        match why {
            Some(w) if c.peer.is_none() => {
                self.stats.links_refused.add(1);
                self.stats.problem(format!("BU {}: refused a connection: {w}", self.cfg.bu.bu));
            }
            Some(w) => self.stats.problem(format!("BU {}: {w}", self.cfg.bu.bu)),
            None => {}
        }
        Ok(())
    }

    pub(super) fn flush_conns(&mut self) {
        let registry = self.poll.registry();
        let mut broken = Vec::new();
        for (token, conn) in self.conns.iter_mut() {
            if conn.queued_bytes() > 0
                && let Err(e) = conn.flush(&NoPieces, registry)
            {
                broken.push((*token, e));
            }
        }
        for (token, e) in broken {
            if let Some(mut c) = self.conns.remove(&token) {
                c.deregister(self.poll.registry());
                self.stats.problem(format!("BU {}: {}: {e}", self.cfg.bu.bu, c.address));
            }
        }
    }
}
